"""quickstart-depl: Flower's quickstart-pytorch with DepL planning, compressing and tracking."""
