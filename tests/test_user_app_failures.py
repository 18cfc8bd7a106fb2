"""A user's own Flower app whose clients fail every reply: one line naming the client and the exception."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")
torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from clients.user_app import DepLClient  # noqa: E402
from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.orchestration.reply_failures import error_gist, no_usable_reply  # noqa: E402
from depl_fl.task.subnets import UserNetwork  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.robust_aggregation import norm_rejection  # noqa: E402
from strategies.user_app import depl_strategy, evaluate_fn, initial_arrays  # noqa: E402
from tests.user_app_wiring import small_mlp, user_client_app  # noqa: E402

#: The shape of an error reply's reason under Flower's Ray backend (abridged): the wrapper's
#: repr, the ClientApp's traceback, the chained wrapper exceptions.
RAY_REASON = (
    "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run() (pid=1)\n"
    '  File "client_app.py", line 27, in train_\n'
    "    return depl.train(msg, context, loader)\n"
    "ValueError: state names differ from the model: missing ['bn1.bias'], unexpected ['features.0.bias']\n"
    "\nThe above exception was the direct cause of the following exception:\n\n"
    "flwr.clientapp.client_app.ClientAppException: \n"
    "Exception ClientAppException occurred. Message: state names differ'>")


def test_error_gist_is_the_root_exception_line_of_a_ray_error_reply():
    assert error_gist("error reply (code 2): " + RAY_REASON) == (
        "ValueError: state names differ from the model: missing ['bn1.bias'], unexpected ['features.0.bias']")
    assert error_gist("error reply (code 2): KeyError: 'img'") == "KeyError: 'img'"
    assert error_gist("fc.bias has shape (3,), expected (10,)") == "fc.bias has shape (3,), expected (10,)"
    assert error_gist("RuntimeError: " + "x" * 500, limit=40) == "RuntimeError: " + "x" * 23 + "..."


def test_no_usable_reply_names_the_phase_the_rounds_and_the_first_client():
    records = [{"rejected": [{"client": "c1", "reason": "error reply (code 2): " + RAY_REASON},
                             {"client": "c2", "reason": "no reply"}]},
               {"rejected": [{"client": "c1", "reason": "no reply"}]}]
    assert no_usable_reply("exploration", records) == (
        "exploration: no client sent a usable reply in 2 round(s); c1: ValueError: state names differ "
        "from the model: missing ['bn1.bias'], unexpected ['features.0.bias']")
    assert no_usable_reply("exploration", [{"rejected": []}]) == (
        "exploration: no client sent a usable reply in 1 round(s)")


def test_no_usable_reply_says_what_to_change_when_every_update_was_too_large():
    too_large = norm_rejection(1.43e5, 1790.0, 10.0)
    line = no_usable_reply("exploration", [{"rejected": [{"client": "c1", "reason": too_large},
                                                         {"client": "c2", "reason": too_large}]}])
    assert line.startswith("exploration: no client sent a usable reply in 1 round(s); "
                           "c1: update norm 1.43e+05")
    assert "Lower the learning rate, train.lr, or raise aggregation.norm_factor" in line
    mixed = no_usable_reply("exploration", [{"rejected": [{"client": "c1", "reason": too_large},
                                                          {"client": "c2", "reason": "no reply"}]}])
    assert "norm_factor" not in mixed  # another failure: the hint would mislead


class _OtherMLP(nn.Module):
    """The same sizes under other entry names: a ClientApp that builds another network than the server."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.out(torch.relu(self.hidden(torch.flatten(x, 1))))


def _loader() -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(12, 4, generator=gen), torch.arange(12) % 3), batch_size=4)


def _train(net, loader, epochs, device):  # noqa: ARG001
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()


def _test(net, loader, device):  # noqa: ARG001
    with torch.no_grad():
        x, y = next(iter(loader))
        return float(nn.functional.cross_entropy(net(x), y)), 0.0


def _two_exploration_rounds(network: UserNetwork, cache_dir):
    """The strategy of a 2-client job that explores in 2 rounds (its profile cached in ``cache_dir``)."""
    return depl_strategy(network, num_clients=2, overrides=[
        "target.loss=0.5", "target.prob=0.8", "profile.explore.rounds=2", "profile.explore.max_rounds=2",
        "profile.explore.switch_rounds=[2]", f"profile.cache_dir={cache_dir}"])


def test_a_clientapp_with_another_network_stops_the_job_in_one_line(tmp_path):
    client = DepLClient(UserNetwork(_OtherMLP, (4,), "OtherMLP"), _train)
    app = user_client_app(client, _loader)
    network = UserNetwork(small_mlp, (4,), "mlp")
    strategy = _two_exploration_rounds(network, tmp_path)
    with pytest.raises(ScenarioError) as err:
        strategy.start(InProcessGrid(app, 2), initial_arrays(network),
                       evaluate_fn=evaluate_fn(strategy, _test, _loader()))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("exploration: no client sent a usable reply in 2 round(s); c")
    assert "do not fit this node's network 'OtherMLP'" in message
    assert "the ServerApp and the ClientApp must describe the same UserNetwork" in message


class _NeedsClasses(nn.Module):
    """quickstart's habit: the number of classes as a required argument."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(torch.flatten(x, 1))


def test_a_builder_that_needs_arguments_is_refused_in_one_line():
    with pytest.raises(ScenarioError) as err:
        depl_strategy(UserNetwork(_NeedsClasses, (4,), "Net"), num_clients=2)
    assert str(err.value) == (
        "Net: UserNetwork calls its builder with no arguments (missing a required argument: 'num_classes'); "
        "give them with functools.partial, e.g. UserNetwork(functools.partial(Net, num_classes=10), ...)")
    import functools

    assert depl_strategy(UserNetwork(functools.partial(_NeedsClasses, num_classes=3), (4,), "Net"),
                         num_clients=2, compressions=(0.0,)).arch == "Net"


def test_the_profile_cache_keys_on_the_users_network():
    from depl_fl.orchestration.profiling import federated_key
    from strategies.server_app import profile_config
    from strategies.user_app import depl_config

    cfg = depl_config(2)
    props = {"c0": {"cluster": "A", "num-samples": 12}, "c1": {"cluster": "B", "num-samples": 12}}
    mlp, other = UserNetwork(small_mlp, (4,), "Net"), UserNetwork(_OtherMLP, (4,), "Net")
    key = federated_key(profile_config(cfg, mlp), props)
    assert key == federated_key(profile_config(cfg, UserNetwork(small_mlp, (4,), "Net")), props)
    assert key != federated_key(profile_config(cfg, other), props)  # same sizes, other entries and code
    wider = UserNetwork(lambda: nn.Sequential(nn.Flatten(), nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)),
                        (4,), "Net")
    assert key != federated_key(profile_config(cfg, wider), props)
    assert federated_key(cfg, props) != key  # without the network the key was one for every network
    from depl_fl.task.partitions import geometry

    assert profile_config(cfg, geometry(cfg)) is cfg  # DepL's own networks key as before


def test_reported_loss_keeps_numbers_and_reads_nothing_as_no_loss():
    from depl_fl.task.user_update import reported_loss

    assert reported_loss(None) is None and reported_loss({"loss": 1.0}) is None
    assert reported_loss(True) is None
    assert reported_loss(0.5) == 0.5 and reported_loss(torch.tensor(2.0)) == 2.0
    assert reported_loss(float("nan")) != reported_loss(float("nan"))  # a diverged loss stays NaN (rejected)


class _Stop(Exception):
    """Ends the job once the exploration has run."""


def test_a_train_function_that_returns_nothing_trains(tmp_path):
    def train_silently(net, loader, epochs, device):
        _train(net, loader, epochs, device)  # returns None, as many users' train functions do

    client = DepLClient(UserNetwork(small_mlp, (4,), "mlp"), train_silently)
    app = user_client_app(client, _loader)
    network = UserNetwork(small_mlp, (4,), "mlp")
    strategy = _two_exploration_rounds(network, tmp_path)
    explore = strategy.profiler.run

    def explore_then_stop(*args, **kwargs):
        explore(*args, **kwargs)
        raise _Stop

    strategy.profiler.run = explore_then_stop
    with pytest.raises(_Stop):
        strategy.start(InProcessGrid(app, 2), initial_arrays(network),
                       evaluate_fn=evaluate_fn(strategy, _test, _loader()))
    records = strategy.profiler.records
    assert len(records) == 2 and all(r["rejected"] == [] and r["replied"] for r in records)


def _conv() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def _flat_loader() -> DataLoader:
    """Images flattened to 16 values: not the (1, 4, 4) samples the network was described with."""
    return DataLoader(TensorDataset(torch.zeros(6, 16), torch.arange(6) % 3), batch_size=3)


def test_a_loader_of_other_shapes_fails_in_one_line_naming_both_shapes():
    from depl_fl.task.models import get_state
    from depl_fl.task.subnets import full_network
    from depl_fl.task.user_update import user_evaluate, user_local_update

    network = UserNetwork(_conv, (1, 4, 4), "conv")
    state = get_state(full_network(network, seed=0))
    hint = ("(the network takes one sample of shape (1, 4, 4), the UserNetwork's input_shape; "
            "the loader's first batch has inputs of shape (3, 16))")
    with pytest.raises(ScenarioError) as err:
        user_evaluate(network, state, 0.0, _test, _flat_loader())
    assert str(err.value).startswith("test failed on the server's test loader: RuntimeError: ")
    assert str(err.value).endswith(hint)
    with pytest.raises(ScenarioError) as err:
        user_local_update(network, state, 0.0, _train, _flat_loader(), 1)
    assert str(err.value).startswith("train failed on this node's train loader: RuntimeError: ")
    assert str(err.value).endswith(hint)


def test_a_test_function_returning_the_loss_alone_is_refused_in_one_line():
    from depl_fl.task.models import get_state
    from depl_fl.task.subnets import full_network
    from depl_fl.task.user_update import user_evaluate

    network = UserNetwork(small_mlp, (4,), "mlp")
    state = get_state(full_network(network, seed=0))
    with pytest.raises(ScenarioError, match=r"^test must return \(loss, accuracy\), got float 1\.0$"):
        user_evaluate(network, state, 0.0, lambda net, loader, device: 1.0, _loader())
    assert user_evaluate(network, state, 0.0, _test, _loader())[1] == 0.0
