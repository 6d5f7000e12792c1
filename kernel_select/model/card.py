"""The model card: the JSON half of a checkpoint (model/checkpoint.py), and everything a model needs
besides its weights.

A `ModelCard` holds the architecture (so a checkpoint rebuilds its own network), the feature version,
names and standardization, the kernel overhead, the dtypes, layouts and domain trained on, and the
provenance: device and GPU identity, dataset hashes, training software versions, metrics and date.
Hard bounds keep a careless or hostile card from describing a network that would take gigabytes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from kernel_select.device import DeviceSpec
from kernel_select.layouts import DEFAULT_LAYOUT, check_layout
from kernel_select.problem import TF32

if TYPE_CHECKING:
    from kernel_select.problem import Problem

log = logging.getLogger(__name__)

CARD_SCHEMA_VERSION = 2


#: A card's `layouts`: operand layouts (kernel_select.layouts) the training rows had; a
#: misspelled one fails the card like any other bad field (check_layout's ProblemError is a ValueError).
TrainedLayouts = Annotated[list[str], AfterValidator(lambda layouts: [check_layout(x) for x in layouts])]


#: Hard bounds on what a card may describe. A card is a small JSON file that decides how much memory
#: the network built from it takes before its weights are checked; these keep a careless or hostile
#: card from allocating gigabytes (the shipped networks: 60 inputs, widths <= 96, 4 members).
MAX_INPUTS = 1024
MAX_WIDTH = 4096
MAX_HIDDEN_LAYERS = 8
MAX_MEMBERS = 8


class Architecture(BaseModel):
    """A feed-forward network: inputs -> [Linear -> activation] per hidden width -> Linear(1)."""

    model_config = ConfigDict(extra="forbid")

    inputs: int = Field(gt=0, le=MAX_INPUTS)
    hidden_widths: list[Annotated[int, Field(gt=0, le=MAX_WIDTH)]] = Field(max_length=MAX_HIDDEN_LAYERS)
    activation: Literal["relu", "silu"]
    # networks of this shape trained from different seeds, whose log-ms outputs are averaged
    # (an MLP card only; a card without the field describes one network)
    members: int = Field(default=1, ge=1, le=MAX_MEMBERS)


class DataFile(BaseModel):
    """One dataset file a model was trained on."""

    model_config = ConfigDict(extra="forbid")

    file: str  # file name only; paths differ between machines
    sha256: str


class DataProvenance(BaseModel):
    """What the model was trained on."""

    model_config = ConfigDict(extra="forbid")

    file: str  # file name only ("a.parquet+b.parquet" for several); paths differ between machines
    sha256: str  # of the file; for several, of their sha256s concatenated in `files` order
    files: list[DataFile] = []  # each file with its own hash (empty in cards of one-file models)
    rows: int  # rows used: train and val problems, usable runtimes
    problems: dict[str, int]  # split -> number of problems (train, val)
    device_names: list[str]
    torch_versions: list[str]
    triton_versions: list[str]


#: A stratum of the domain: "<op>/<precision>/<M bucket>", the precision a dtype or "tf32" (a float32
#: GEMM that ran with TF32: kernel_select.problem.TF32). Buckets as evaluation reports them.
M_BUCKETS = ((16, "m<=16"), (256, "m<=256"), (4096, "m<=4096"), (2**62, "m>4096"))
#: Fewer training problems than this in a problem's stratum, and the model is outside what it knows.
MIN_STRATUM_PROBLEMS = 20
#: A problem with more work (FLOPs) than this many times the largest training problem of its stratum
#: is outside the domain too, though each of its dimensions lies in the trained range: the features are
#: logarithms, so a model extrapolates past the largest problem it saw without warning. On the H200, a
#: float32 LM head (8192x30522x768, 24x the stratum's largest) was predicted 1.7x too fast and handed
#: to Triton alone at 2x cuBLAS's time; bf16 output heads at 1.3-2.2x their stratum's largest were
#: ranked as well as the layers.
WORK_SLACK = 4.0


def m_bucket(m: int) -> str:
    return next(name for edge, name in M_BUCKETS if m <= edge)


def stratum(op: str, precision: str, m: int) -> str:
    """The domain stratum of a problem: batched GEMMs are one op ("bmm", with baddbmm), single ones
    another ("mm", with addmm); `precision` is its dtype, or "tf32" (`Problem.precision`)."""
    kind = "bmm" if op in ("bmm", "baddbmm") else "mm"
    return f"{kind}/{precision}/{m_bucket(m)}"


class Domain(BaseModel):
    """What a model's training data covered: the Inductor handler keeps Inductor's own candidates
    beside the model's for a problem outside it (kernel_select.model.base.PerformanceModel.domain_gap)."""

    model_config = ConfigDict(extra="forbid")

    strata: dict[str, int]  # stratum(op, precision, m) -> training problems in it
    m: tuple[int, int]  # smallest and largest value of each dimension trained on
    n: tuple[int, int]
    k: tuple[int, int]
    batch: tuple[int, int] = (1, 1)
    #: stratum -> the most FLOPs (2 * batch * M * N * K) of a training problem in it; empty in cards
    #: written before it was recorded (no bound on work)
    work: dict[str, float] = {}


#: fp16 and bf16 have the same size and tensor-core rate, so their features are identical: a model
#: trained on one scores the other the same way.
SAME_FEATURES = {"float16": "bfloat16", "bfloat16": "float16"}


def trained_dtype(dtype: str, dtypes: Sequence[str]) -> bool:
    """Whether a model trained on `dtypes` scores `dtype` (itself, or its twin of SAME_FEATURES)."""
    return dtype in dtypes or SAME_FEATURES.get(dtype) in dtypes


def problems_like(problem: Problem, domain: Domain) -> int:
    """Training problems in the problem's domain stratum (op, precision, M bucket)."""
    return int(stratum_count(stratum(problem.op, problem.precision, problem.m), domain.strata))


def stratum_count(key: str, strata: Mapping[str, float]) -> float:
    """What a model counts for stratum `key` ("op/dtype/bucket") in `strata` (training problems, or
    the most work of one): its dtype's or its SAME_FEATURES twin's, whichever is larger."""
    op, dtype, bucket = key.split("/")
    return max(strata.get(key, 0), strata.get(f"{op}/{SAME_FEATURES.get(dtype, dtype)}/{bucket}", 0))


def outside_domain(problem: Problem, dtypes: Sequence[str], domain: Domain | None) -> str:
    """Why `problem` lies outside what a card's training data covered (`dtypes`, `domain`), or "":
    a dtype never trained on, float32 with TF32 where no stratum of the domain has TF32, a stratum
    with fewer than MIN_STRATUM_PROBLEMS training problems, or a dimension outside the trained range
    (PerformanceModel.domain_gap of a trained model)."""
    if dtypes and not trained_dtype(problem.dtype, dtypes):
        return f"dtype {problem.dtype} not in the model's training data"
    if problem.tf32 and not (domain is not None and any(key.split("/")[1] == TF32 for key in domain.strata)):
        return "float32 with TF32 (Inductor's ALLOW_TF32) not in the model's training data"
    if domain is None:  # a card from before the domain was recorded: single GEMMs only
        batched = problem.op in ("bmm", "baddbmm")
        return f"{problem.op} never measured for this model" if batched else ""
    key = stratum(problem.op, problem.precision, problem.m)
    count = problems_like(problem, domain)
    if count < MIN_STRATUM_PROBLEMS:
        return f"{count} training problems like it ({key}; fewer than {MIN_STRATUM_PROBLEMS})"
    for name, value, (low, high) in (("m", problem.m, domain.m), ("n", problem.n, domain.n),
                                     ("k", problem.k, domain.k), ("batch", problem.batch, domain.batch)):
        if not low <= value <= high:
            return f"{name} = {value} outside the trained {low}..{high}"
    largest = stratum_count(key, domain.work)
    if largest and problem.flops > WORK_SLACK * largest:
        return (f"{problem.flops:.3g} FLOPs, {problem.flops / largest:.1f}x the largest training problem "
                f"of {key} (more than {WORK_SLACK:g}x)")
    return ""


class GpuIdentity(BaseModel):
    """The GPU a model was measured on, beyond its key: two GPUs of one key with another SM count
    (a cut-down or partitioned part) or capability time kernels differently, so a card that
    records its GPU is loaded only on that GPU (`check_card`)."""

    model_config = ConfigDict(extra="forbid")

    name: str  # as torch.cuda.get_device_name() reports it
    capability: tuple[int, int]
    sm_count: int = Field(ge=1)

    @classmethod
    def of(cls, spec: DeviceSpec) -> GpuIdentity:
        return cls(name=spec.name, capability=spec.capability, sm_count=spec.sm_count)

    def describe(self) -> str:
        return f"{self.name} (sm_{self.capability[0]}{self.capability[1]}, {self.sm_count} SMs)"


#: Most configs the `topk="auto"` floor may ask for (more than any search space holds).
MAX_AUTO_FLOOR = 4096


class AutoTopkRule(BaseModel):
    """The `topk="auto"` rule among a card's hyperparameters (offline/training/auto_refit.py writes
    it; model/auto_topk.py applies it), typed and bounded, so that a hand-edited card is refused when
    it loads, naming the field, instead of failing inside a compile."""

    model_config = ConfigDict(extra="ignore", strict=True)

    auto_topk_rule: Literal["gap", "spread"] | None = None
    auto_topk_gap: float | None = Field(default=None, ge=0, allow_inf_nan=False)  # None: the model's default
    auto_topk_floor: int = Field(default=1, ge=1, le=MAX_AUTO_FLOOR)
    auto_topk_spread: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _spread_rule_has_a_spread(self) -> AutoTopkRule:
        if self.auto_topk_rule == "spread" and self.auto_topk_spread is None:
            raise ValueError('auto_topk_rule is "spread" but auto_topk_spread is missing; add it (a '
                             'number, 0 or more) or set auto_topk_rule to "gap"')
        return self


class ModelCard(BaseModel):
    """The JSON half of a checkpoint (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[2] = CARD_SCHEMA_VERSION
    model: str  # what the checkpoint is: "mlp", "cublas_gate", ...
    device: str  # DeviceSpec.key the training data was measured on
    #: the GPU itself; None in cards written before it was recorded (loaded on any GPU of `device`)
    gpu: GpuIdentity | None = None
    architecture: Architecture
    feature_version: int
    feature_names: list[str]
    feature_mean: list[float]  # standardization statistics, from the training split
    feature_std: list[float]
    kernel_overhead_ms: float | None = None  # learned launch floor (the weights hold the exact value)
    dtypes: list[str] = []  # dtypes present in training; empty: not restricted
    # operand layouts (kernel_select.layouts) present in training: every card written before the
    # field existed was trained on "nn" rows only; topk="auto" hedges outside them
    layouts: TrainedLayouts = [DEFAULT_LAYOUT]
    #: the problems the training data covered; None in cards written before it was recorded, which were
    #: trained on single GEMMs (mm) of `dtypes` and `layouts` only
    domain: Domain | None = None
    hyperparameters: dict[str, Any] = {}
    data: DataProvenance | None = None
    metrics: dict[str, Any] = {}
    trained_at: str = ""
    versions: dict[str, str] = {}  # training software: kernel_select, torch, triton, numpy

    @model_validator(mode="before")
    @classmethod
    def _upgrade_v1(cls, data: Any) -> Any:
        # Schema v1 (the MLP's first card) kept the widths at the top level and called the
        # software versions "trainer"; its network was always ReLU. Read it as v2.
        if not isinstance(data, dict) or data.get("schema_version", 1) != 1 or "hidden_widths" not in data:
            return data
        upgraded = {k: v for k, v in data.items() if k not in ("hidden_widths", "trainer", "schema_version")}
        upgraded["architecture"] = {"inputs": len(data.get("feature_names", [])),
                                    "hidden_widths": data["hidden_widths"], "activation": "relu"}
        upgraded["versions"] = data.get("trainer", {})
        upgraded.setdefault("model", "mlp")  # v1 cards were only ever written for the MLP
        return upgraded

    @field_validator("hyperparameters")
    @classmethod
    def _valid_auto_topk_rule(cls, hyperparameters: dict[str, Any]) -> dict[str, Any]:
        try:
            AutoTopkRule.model_validate(hyperparameters)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            detail = first["msg"].removeprefix("Value error, ")
            raise ValueError(f"{where}: {detail}" if where else detail) from None
        return hyperparameters

    @property
    def auto_topk(self) -> AutoTopkRule:
        """The `topk="auto"` rule of these hyperparameters (validated with the card)."""
        return AutoTopkRule.model_validate(self.hyperparameters)

    @property
    def hidden_widths(self) -> list[int]:
        return self.architecture.hidden_widths




def training_versions() -> dict[str, str]:
    """The installed versions of the training software, for a card (triton only where installed)."""
    import importlib.metadata

    versions = {}
    for package in ("kernel_select", "torch", "triton", "numpy"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def utc_now() -> str:
    """A card's `trained_at`: the current UTC time to the second, ISO 8601."""
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


























