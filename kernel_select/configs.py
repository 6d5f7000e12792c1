"""GemmConfig, and the one place that converts it to Triton and Inductor forms.

A GemmConfig carries Inductor's lowercase field names. It converts to a `triton.Config`
(BLOCK_M... keys, triton imported lazily), to the template kwargs Inductor renders its
`triton::mm` template with for a given problem, and back from Inductor's AUTOTUNE log lines.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kernel_select.errors import ConfigError

if TYPE_CHECKING:
    from kernel_select.problem import Problem

_POW2_BLOCKS = (16, 32, 64, 128, 256, 512, 1024)
_KWARG_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps")


class GemmConfig(BaseModel):
    """One Triton mm kernel configuration. Frozen, hashable, keyword-only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_m: int = Field(description="rows of C per program (power of two, 16..1024)")
    block_n: int = Field(description="columns of C per program (power of two, 16..1024)")
    block_k: int = Field(description="K step of the inner loop (power of two, 16..1024)")
    num_stages: int = Field(ge=1, le=8, description="software-pipelining depth of the K loop")
    num_warps: int = Field(description="warps per program (1, 2, 4, 8, 16 or 32)")
    group_m: int = Field(default=8, ge=1, le=64, description="rows of programs per L2 swizzle group")

    @field_validator("block_m", "block_n", "block_k")
    @classmethod
    def _power_of_two_block(cls, value: int) -> int:
        if value not in _POW2_BLOCKS:
            raise ValueError(f"must be a power of two from 16 to 1024, got {value}")
        return value

    @field_validator("num_warps")
    @classmethod
    def _power_of_two_warps(cls, value: int) -> int:
        if value not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"must be 1, 2, 4, 8, 16 or 32, got {value}")
        return value

    @property
    def key(self) -> tuple[int, int, int, int, int, int]:
        """Sort/dedupe key: (block_m, block_n, block_k, num_stages, num_warps, group_m)."""
        return (self.block_m, self.block_n, self.block_k, self.num_stages, self.num_warps, self.group_m)

    @classmethod
    def from_key(cls, key: tuple[int, ...]) -> GemmConfig:
        """Build from (block_m, block_n, block_k, num_stages, num_warps[, group_m]), validated."""
        names = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
        return cls.create(**dict(zip(names, key)))

    @classmethod
    def create(cls, **fields: Any) -> GemmConfig:
        """Validated construction that raises ConfigError instead of pydantic's ValidationError."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "config"
            raise ConfigError(f"{where}: {first['msg']} (in {fields})") from None

    def short(self) -> str:
        """Compact human form: 64x128x64 s3 w4 (g8 only when not the default)."""
        group = "" if self.group_m == 8 else f" g{self.group_m}"
        return f"{self.block_m}x{self.block_n}x{self.block_k} s{self.num_stages} w{self.num_warps}{group}"

    def __str__(self) -> str:
        return self.short()

    # -- conversions -------------------------------------------------------------------------

    def triton_kwargs(self) -> dict[str, int]:
        """The meta-parameters a Triton mm kernel takes: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k,
                "GROUP_M": self.group_m}

    def to_triton(self) -> Any:
        """A `triton.Config` for `@triton.autotune` kernels (imports triton lazily)."""
        import triton

        return triton.Config(self.triton_kwargs(), num_stages=self.num_stages, num_warps=self.num_warps)

    @classmethod
    def from_triton(cls, config: Any) -> GemmConfig:
        """Inverse of to_triton for any object with .kwargs, .num_stages and .num_warps."""
        kwargs = dict(config.kwargs)
        return cls.create(block_m=kwargs["BLOCK_M"], block_n=kwargs["BLOCK_N"], block_k=kwargs["BLOCK_K"],
                          group_m=kwargs.get("GROUP_M", 8), num_stages=config.num_stages,
                          num_warps=config.num_warps)

    def inductor_kwargs(self, problem: Problem, *, even_k: bool | None = None) -> dict[str, Any]:
        """The per-config kwargs of Inductor's `triton::mm` template: the tile, GROUP_M,
        num_stages, num_warps and EVEN_K.

        `even_k` defaults to `problem.k % block_k == 0`, right for a static K; with a dynamic K
        the caller must decide it for every K the graph accepts. The template-wide kwargs
        (ACC_TYPE, ALLOW_TF32, USE_FAST_ACCUM, ...) are not the config's: inside a compile they
        come from Inductor's own choice, elsewhere from `mm_template_kwargs`.
        """
        return {
            "BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k,
            "GROUP_M": self.group_m, "num_stages": self.num_stages, "num_warps": self.num_warps,
            "EVEN_K": problem.k % self.block_k == 0 if even_k is None else even_k,
        }

    @classmethod
    def from_inductor_kwargs(cls, kwargs: dict[str, Any]) -> GemmConfig:
        """Read BLOCK_*/GROUP_M/num_stages/num_warps out of Inductor template kwargs."""
        try:
            return cls.create(block_m=_whole(kwargs["BLOCK_M"]), block_n=_whole(kwargs["BLOCK_N"]),
                              block_k=_whole(kwargs["BLOCK_K"]), group_m=_whole(kwargs.get("GROUP_M", 8)),
                              num_stages=_whole(kwargs["num_stages"]), num_warps=_whole(kwargs["num_warps"]))
        except KeyError as exc:
            raise ConfigError(f"{exc.args[0]}: missing from Inductor kwargs {_clipped(kwargs)}") from None
        except (TypeError, ValueError):
            named = {name: kwargs.get(name) for name in _KWARG_NAMES}
            raise ConfigError(f"Inductor kwargs: BLOCK_*, GROUP_M, num_stages and num_warps must be "
                              f"integers, got {_clipped(named)}") from None


def _whole(value: Any) -> int:
    """An Inductor kwarg as an int: an int, a whole float or ASCII digits (int() alone would take
    "٦٤" or 5,000 digits)."""
    if isinstance(value, str) and not (value.isascii() and _INT.fullmatch(value.strip())):
        raise ValueError(f"not an integer: {_clipped(value)}")
    return int(value)


def mm_template_kwargs(problem: Problem) -> dict[str, Any]:
    """The template-wide kwargs Inductor renders `triton::mm` with for `problem`, besides
    ALLOW_TF32 (which Inductor derives from the backend settings for each compile)."""
    return {"ACC_TYPE": acc_type(problem.dtype),
            "USE_FAST_ACCUM": False}  # only scaled_mm uses fast accumulation


def acc_type(dtype: str) -> str:
    """Inductor's ACC_TYPE: fp32 accumulation for half types, the dtype itself otherwise."""
    return "tl.float32" if dtype in ("float16", "bfloat16", "float32") else f"tl.{dtype}"


def torch_minor_version(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of `version`, or of the installed torch; (0, 0) when torch is absent."""
    if version is None:
        try:
            import torch
        except ImportError:
            return (0, 0)
        version = torch.__version__
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


# -- Inductor AUTOTUNE log descriptions ---------------------------------------------------------

_KV = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=('[^']*'|\"[^\"]*\"|[^,\s]+)")


def parse_inductor_description(text: str) -> dict[str, Any]:
    """Parse "ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, ..., num_warps=4" into a dict.

    Values are Python literals (ints, bools, quoted strings); anything else is kept as text.
    """
    pairs = _KV.findall(text)
    if not pairs:
        raise ConfigError(f"no KEY=value pairs in Inductor description {_clipped(text)}")
    return {key: _literal(raw) for key, raw in pairs}


_INT = re.compile(r"[+-]?\d{1,18}", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:\d{1,18}\.\d{0,18}|\.\d{1,18})(?:[eE][+-]?\d{1,3})?", re.ASCII)
_CONSTANTS = {"True": True, "False": False, "None": None}


def _literal(raw: str) -> Any:
    """The value of one description field: an int, a float, a bool, None or a quoted string; any
    other text is kept as it is. Not ast.literal_eval: a log line is not trusted, and 200,000 "-"
    or 5,000 "~" make that recurse until MemoryError or RecursionError; each pattern here is
    bounded (an int of at most 18 digits)."""
    if raw in _CONSTANTS:
        return _CONSTANTS[raw]
    if _INT.fullmatch(raw):
        return int(raw)
    if _FLOAT.fullmatch(raw):
        return float(raw)
    if len(raw) >= 2 and raw[0] in "'\"" and raw[-1] == raw[0]:
        return raw[1:-1]
    return raw


def _clipped(value: Any) -> str:
    """repr(value), cut short: a description may be a whole log line."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:80] + "..."


def config_from_description(text: str) -> GemmConfig:
    """A GemmConfig from an Inductor AUTOTUNE description string (a pasted log line works too)."""
    return GemmConfig.from_inductor_kwargs(parse_inductor_description(text))
