"""A model card cannot make loading allocate or read without bound, nor pass for another model.

A card is a small JSON file that decides the network built from it, so what it may describe is bounded
(kernel_select.model.card MAX_*), weights that do not fit it are refused on torch's meta device before
the network is built for real, the weights file is size-checked before it is read, and its feature
names are this code's own, in order. Each row here is a ModelCardMismatchError naming the file, the
field and the fix, raised before the work the card describes: the weights are not read unless their
shapes are what is compared, and no network is built but on the meta device. (.ci/mutation removes
each of these checks and expects this module to fail.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernel_select.errors import ModelCardMismatchError
from kernel_select.model import checkpoint as checkpoint_module
from kernel_select.model import mlp as mlp_module
from kernel_select.model.card import MAX_HIDDEN_LAYERS, MAX_MEMBERS, MAX_WIDTH
from kernel_select.model.checkpoint import MAX_WEIGHTS_BYTES, load_network, retrain_hint, save_checkpoint
from kernel_select.model.mlp import CARD_FILE, STEM, WEIGHTS_FILE, MLPModel, build_net
from tests.synthetic import untrained_mlp


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A small trained-shape MLP checkpoint (widths 16, 16; one member) for the h100."""
    model = untrained_mlp()
    save_checkpoint(tmp_path, STEM, model.net.state_dict(), model.card)
    return tmp_path


def edit_card(folder: Path, **architecture: object) -> None:
    card = json.loads((folder / CARD_FILE).read_text())
    card["architecture"].update(architecture)
    (folder / CARD_FILE).write_text(json.dumps(card))


def refused(folder: Path, match: str, *, weights_read: bool = False) -> str:
    """The load's error message, which must match `match`, name the card or weights and say how to
    retrain. The refusal comes before the work the card describes: no network is built but on torch's
    meta device (a card at its bounds describes gigabytes), and the weights are not read unless
    `weights_read` (a refusal that compares their shapes with the card's)."""
    built_on: list[str] = []
    read: list[object] = []
    real_load = torch.load

    def build(architecture: object) -> torch.nn.Module:
        built_on.append(torch.empty(0).device.type)  # the device a factory call lands on now
        return build_net(architecture)

    def load(path: object, *args: object, **kwargs: object) -> object:
        read.append(path)
        return real_load(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mlp_module, "build_net", build)
        patch.setattr(torch, "load", load)
        with pytest.raises(ModelCardMismatchError, match=match) as info:
            MLPModel.load(folder, "h100")
    assert set(built_on) <= {"meta"}, f"a network was built on {built_on}"
    assert bool(read) == weights_read, f"weights read: {read}"
    message = str(info.value)
    assert message.startswith(str(folder)) and f"--out {folder} --device h100" in message
    return message


# -- what a card may describe ---------------------------------------------------------------------------

@pytest.mark.parametrize("architecture, field, bound", [
    ({"hidden_widths": [MAX_WIDTH + 1]}, "architecture.hidden_widths.0",
     f"less than or equal to {MAX_WIDTH}"),
    ({"hidden_widths": [20_000_000]}, "architecture.hidden_widths.0", f"less than or equal to {MAX_WIDTH}"),
    ({"hidden_widths": [16, 100_000, 100_000]}, "architecture.hidden_widths.1", "less than or equal"),
    ({"hidden_widths": [-1]}, "architecture.hidden_widths.0", "greater than 0"),
    ({"hidden_widths": [0, 16]}, "architecture.hidden_widths.0", "greater than 0"),
    ({"hidden_widths": [16] * (MAX_HIDDEN_LAYERS + 1)}, "architecture.hidden_widths",
     f"at most {MAX_HIDDEN_LAYERS} items"),
    ({"hidden_widths": [16] * 100_000}, "architecture.hidden_widths", f"at most {MAX_HIDDEN_LAYERS} items"),
    ({"members": MAX_MEMBERS + 1}, "architecture.members", f"less than or equal to {MAX_MEMBERS}"),
    ({"members": 100_000}, "architecture.members", f"less than or equal to {MAX_MEMBERS}"),
])
def test_an_architecture_beyond_the_bounds_is_refused_from_the_card_alone(saved: Path, architecture: dict,
                                                                         field: str, bound: str):
    edit_card(saved, **architecture)
    refused(saved, f"^{saved / CARD_FILE}: field '{field}': .*{bound}")


def test_the_largest_architecture_a_card_may_describe_loads_when_its_weights_fit(tmp_path: Path):
    # the bounds refuse what is beyond them, not what is at them (one member of the widest, deepest body)
    model = untrained_mlp(hidden_widths=(MAX_WIDTH,) + (8,) * (MAX_HIDDEN_LAYERS - 1))
    save_checkpoint(tmp_path, STEM, model.net.state_dict(), model.card)
    assert MLPModel.load(tmp_path, "h100").card.hidden_widths == model.card.hidden_widths


# -- weights that do not fit the card -------------------------------------------------------------------

def test_weights_that_do_not_fit_are_refused_before_the_network_is_built_for_real(saved: Path):
    card = checkpoint_module.read_card(saved / CARD_FILE, "hint")
    state = torch.load(saved / WEIGHTS_FILE, weights_only=True)  # widths 16, 16
    wide = card.model_copy(update={"architecture": card.architecture.model_copy(
        update={"hidden_widths": [1024, 1024], "members": 2})})
    built_on: list[str] = []

    def build():
        built_on.append(torch.empty(0).device.type)  # the device a factory call lands on now
        return build_net(wide.architecture)

    with pytest.raises(ModelCardMismatchError,
                       match=r"weights do not fit the card's architecture \(60 inputs, widths "
                             r"\[1024, 1024\], 2 member\(s\)\): missing \['members\.0\.body\.0\.bias'"):
        load_network(build, state, saved / WEIGHTS_FILE, wide, "hint")
    assert built_on == ["meta"]  # never for real: a card at its bounds describes gigabytes


def test_a_differently_shaped_tensor_is_named_with_both_shapes(saved: Path):
    edit_card(saved, hidden_widths=[32, 16])
    message = refused(saved, "weights do not fit the card's architecture", weights_read=True)
    assert "body.0.bias is [16], the card says [32]" in message


# -- the weights file and the feature names -------------------------------------------------------------

def test_a_weights_file_over_the_cap_is_refused_before_it_is_read(saved: Path):
    with open(saved / WEIGHTS_FILE, "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_WEIGHTS_BYTES + 1)
    message = refused(saved, f"{saved / WEIGHTS_FILE}: {MAX_WEIGHTS_BYTES + 1} bytes, more than a weights "
                             f"file can be \\({MAX_WEIGHTS_BYTES}\\)")
    assert retrain_hint(saved, "h100") in message


def test_a_card_whose_feature_names_are_this_codes_in_another_order_is_refused(saved: Path):
    card = json.loads((saved / CARD_FILE).read_text())
    names = card["feature_names"]
    names[0], names[1] = names[1], names[0]  # the same features, so the same count: still another model
    (saved / CARD_FILE).write_text(json.dumps(card))
    message = refused(saved, f"^{saved / CARD_FILE}: feature_version 5 ")
    assert f"feature 0 is {names[0]!r}, this code's is {names[1]!r}" in message


# -- the topk="auto" rule ----------------------------------------------------------------------------

@pytest.mark.parametrize("hyperparameters, detail", [
    ({"auto_topk_floor": None}, "auto_topk_floor: Input should be a valid integer"),
    ({"auto_topk_floor": "abc"}, "auto_topk_floor: Input should be a valid integer"),
    ({"auto_topk_floor": 0}, "auto_topk_floor: Input should be greater than or equal to 1"),
    ({"auto_topk_gap": [1]}, "auto_topk_gap: Input should be a valid number"),
    ({"auto_topk_gap": "abc"}, "auto_topk_gap: Input should be a valid number"),
    ({"auto_topk_rule": "spread", "auto_topk_spread": None},
     'auto_topk_rule is "spread" but auto_topk_spread is missing'),
    ({"auto_topk_rule": "spread"}, 'auto_topk_rule is "spread" but auto_topk_spread is missing'),
    ({"auto_topk_rule": "abc"}, "auto_topk_rule: Input should be 'gap' or 'spread'"),
])
def test_a_card_with_a_malformed_auto_rule_is_refused_when_it_loads(saved: Path, hyperparameters: dict,
                                                                  detail: str):
    # issue 43 row 7: these were TypeError tracebacks, or "invalid literal for int()" naming no file,
    # from the first topk="auto" call inside a compile
    card = json.loads((saved / CARD_FILE).read_text())
    card["hyperparameters"].update(hyperparameters)
    (saved / CARD_FILE).write_text(json.dumps(card))
    message = refused(saved, f"^{saved / CARD_FILE}: field 'hyperparameters': ")
    assert detail in message and "Value error" not in message


def test_a_card_is_read_as_every_json_file_is(saved: Path):
    # issue 43 row 14: a UTF-8 BOM was accepted in LUTs and refused in cards; a number of thousands
    # of digits gave Python's advice to call sys.set_int_max_str_digits()
    text = (saved / CARD_FILE).read_text()
    (saved / CARD_FILE).write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert MLPModel.load(saved, "h100").card.device == "h100"
    card = json.loads(text)
    (saved / CARD_FILE).write_text(json.dumps(card).replace('"device": "h100"', '"device": ' + "9" * 5000))
    message = refused(saved, f"^{saved / CARD_FILE}: invalid JSON: a number has too many digits")
    # short whatever the folder's path (pytest's temporary folders are longer under xdist)
    assert "set_int_max_str_digits" not in message and len(message.replace(str(saved), "")) < 400
