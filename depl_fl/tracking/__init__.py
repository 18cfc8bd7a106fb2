"""Loss-profile estimation (l_run, l_sw) and online tracking with the re-plan policy."""
