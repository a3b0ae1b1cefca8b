"""An agent's tool files: ``tools.yaml`` (the contracts the model sees) and ``tool_policies.yaml``.

Multi-item operations need no key of their own (seed ``000``): a scalar ``subject`` is as valid as
``items: {type: array}``; the validator and the MCP tool resolve and execute the items, Hatchway
keeps the state, the confirmation and the per-item verdict. ``multi_item``, ``multi_item_strategy``
and ``fan_out`` are therefore rejected wherever they appear, with a message that says so.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

from pydantic import AliasChoices, ConfigDict, Field, field_validator, model_validator

from hatchway.config.loading import StrictModel

MULTI_ITEM_KEYS = ("multi_item", "multi_item_strategy", "fan_out")
_MULTI_ITEM_HINT = (
    "not a Hatchway key: multi-item needs no key. Declare the tool's natural arguments (a scalar "
    "such as `subject`, or `items: {type: array}`), let the validator expand the items and the "
    "tool return `results[]`; Hatchway derives SUCCESS / PARTIAL_SUCCESS / FAILED by itself"
)
_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"


def _reject_multi_item_keys(data: Any) -> Any:
    if isinstance(data, dict):
        for key in MULTI_ITEM_KEYS:
            if key in data:
                raise ValueError(f"{key}: {_MULTI_ITEM_HINT}")
    return data


class AgentFileModel(StrictModel):
    """Base of every model in the agent files: strict, and multi-item keys are refused everywhere."""

    @model_validator(mode="before")
    @classmethod
    def _no_multi_item_keys(cls, data: Any) -> Any:
        return _reject_multi_item_keys(data)


# -- tools.yaml -------------------------------------------------------------------------------------

ArgType = Literal["string", "integer", "number", "boolean", "array", "list", "object"]


class ArgSpec(AgentFileModel):
    """One argument of a tool's contract."""

    type: ArgType = "string"
    """The argument's JSON type (``list`` means ``array``)."""
    label: str | None = None
    """A human name for the argument, used when asking the user for it."""
    description: str | None = None
    """Shown to the model in the tool's parameters."""


class ToolType(StrEnum):
    ACTION = "action"
    QUERY = "query"


def _tool_schema(schema: dict[str, Any]) -> None:
    # ``_shorthand`` below accepts ``subject: string`` for ``subject: {type: string}``.
    args = schema["properties"]["args_schema"]
    args["additionalProperties"] = {
        "anyOf": [args["additionalProperties"], {"enum": list(get_args(ArgType))}]
    }


class ToolDefinition(AgentFileModel):
    """One tool of ``tools.yaml``: what the model sees and which MCP server runs it."""

    model_config = ConfigDict(json_schema_extra=_tool_schema)

    description: str = ""
    """What the model reads about the tool."""
    mcp_server: str
    """The id of the server (in the agent's plugin) that runs the tool."""
    enabled: bool = True
    """A disabled tool is not offered to the model."""
    tool_type: ToolType = ToolType.QUERY
    """``action`` or ``query``."""
    args_schema: dict[str, ArgSpec] = Field(default_factory=dict)
    """The arguments the model sees: name → ``{type, label, description}`` (or just the type)."""
    confirmation_required: bool | None = None
    """Used only when no policy file governs the tool."""
    requires: list[str] | None = None
    """Arguments that must be present; used only when no policy file governs the tool."""
    user_prompt: str | None = None
    """What to ask the user when a required argument is missing."""

    @field_validator("args_schema", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # ``subject: string`` is accepted for ``subject: {type: string}``, as on the seed's platform.
        if isinstance(value, dict):
            for name in value:
                if name in MULTI_ITEM_KEYS:
                    raise ValueError(f"{name}: {_MULTI_ITEM_HINT}")
            return {k: {"type": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _requires_are_arguments(self) -> ToolDefinition:
        for i, arg in enumerate(self.requires or []):
            if arg not in self.args_schema:
                raise ValueError(f"requires[{i}]: {_unknown_arg(arg, self.args_schema)}")
        return self


class ToolsFile(AgentFileModel):
    """The whole of ``tools.yaml``."""

    version: Literal[1] = 1
    """The file format's version: 1."""
    tools: dict[Annotated[str, Field(pattern=_NAME)], ToolDefinition] = Field(default_factory=dict)
    """Tool name → its contract."""


# -- tool_policies.yaml -----------------------------------------------------------------------------


class OperationType(StrEnum):
    TRANSACTIONAL = "transactional"
    READ_ONLY = "read_only"


class PreValidation(AgentFileModel):
    """A validator MCP tool called (without side effects) before confirmation."""

    enabled: bool = True
    """Call the validator before asking for confirmation."""
    tool: str | None = None
    """The validator's MCP tool (on the tool's server); it has no side effects."""
    fail_open: bool = False
    """When the validator is down or malformed: False → the operation FAILS; True → continue as asked."""

    @model_validator(mode="after")
    def _tool_when_enabled(self) -> PreValidation:
        if self.enabled and not self.tool:
            raise ValueError("tool: required when pre_validation is enabled (the validator's MCP tool name)")
        return self


class Execution(AgentFileModel):
    """How the primary tool runs; ``workflow`` tools report under ``workflow.output[<tool>]``."""

    mode: Literal["workflow", "direct"] = "direct"
    """``workflow``: the tool's per-item results are read from ``workflow.output[<tool>].results`` first."""
    workflow: str | None = None
    """The workflow's name (kept in the operation's record)."""
    version: str | int | None = None
    """The workflow's version (kept in the operation's record)."""

    @model_validator(mode="after")
    def _workflow_named(self) -> Execution:
        if self.mode == "workflow" and not self.workflow:
            raise ValueError("workflow: required when mode is workflow")
        return self


class ToolPolicy(AgentFileModel):
    """One tool's policy. Unset fields fall back to the file's ``defaults``."""

    operation_type: OperationType | None = Field(
        default=None, validation_alias=AliasChoices("operation_type", "type")
    )
    """``transactional`` (a durable operation with a verdict) or ``read_only`` (runs at once);
    ``type`` is accepted too."""
    require_confirmation: bool | None = Field(
        default=None, validation_alias=AliasChoices("require_confirmation", "requires_confirmation")
    )
    """Ask the end user before executing; ``requires_confirmation`` is accepted too."""
    requires: list[str] = Field(default_factory=list)
    """Arguments that must be present before anything runs; the model is told to ask for missing ones."""
    pre_validation: PreValidation | None = None
    """A validator MCP tool called before confirmation."""
    execution: Execution | None = None
    """How the tool runs (directly, or as a workflow)."""

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for a, b in (("operation_type", "type"), ("require_confirmation", "requires_confirmation")):
                if a in data and b in data:
                    raise ValueError(f"{b}: an alias of {a}; give only one of them")
        return data


class PolicyDefaults(AgentFileModel):
    operation_type: OperationType = Field(
        default=OperationType.READ_ONLY, validation_alias=AliasChoices("operation_type", "type")
    )
    """For tools without their own; ``type`` is accepted too."""
    require_confirmation: bool = Field(
        default=False, validation_alias=AliasChoices("require_confirmation", "requires_confirmation")
    )
    """For tools without their own; ``requires_confirmation`` is accepted too."""


class PoliciesFile(AgentFileModel):
    """The whole of ``tool_policies.yaml``."""

    version: Literal[1] = 1
    """The file format's version: 1."""
    defaults: PolicyDefaults = Field(default_factory=PolicyDefaults)
    """Values for tools whose policy leaves them unset."""
    tool_policies: dict[str, ToolPolicy] = Field(default_factory=dict)
    """Tool name (of tools.yaml) → its policy."""


# -- hatchway.yaml: operations settings --------------------------------------------------------------


class ConfirmationWords(StrictModel):
    """Extra words for the yes/no reply classifier (added to the built-in pt/en/es lists)."""

    @model_validator(mode="before")
    @classmethod
    def _yaml_booleans(cls, data: Any) -> Any:
        # YAML 1.1 reads the keys `yes:` and `no:` as booleans.
        if isinstance(data, dict):
            return {
                {True: "yes", False: "no"}.get(k, k) if isinstance(k, bool) else k: v for k, v in data.items()
            }
        return data

    yes: list[str] = Field(default_factory=list)
    """Extra words that confirm."""
    no: list[str] = Field(default_factory=list)
    """Extra words that cancel."""
    filler: list[str] = Field(default_factory=list)
    """Words that may accompany a yes without making it ambiguous ("please", "agora"…)."""


class OperationSettings(StrictModel):
    """``operations:`` in hatchway.yaml."""

    confirmation_ttl_seconds: Annotated[float, Field(gt=0)] = 1800.0
    """A pending confirmation expires (CANCELLED, reason ``expired``) after this long."""
    execution_lease_seconds: Annotated[float, Field(ge=1)] = 30.0
    """An EXECUTING operation whose executor stops renewing this lease is marked INTERRUPTED."""
    confirmation_words: ConfirmationWords = Field(default_factory=ConfirmationWords)
    """Words added to the built-in yes/no lists (pt, en, es) that read the user's reply."""
    repeat_window_seconds: Annotated[float, Field(ge=0)] = 600.0
    """A new operation that would do again what one of the same conversation and end user executed
    less than this long ago (the same tool and resolved arguments) is never executed on a bare yes:
    it asks, saying what it repeats, and only a reply to that question confirms it. 0: off."""
    duplicate_window_seconds: Annotated[float, Field(ge=0)] = 60.0
    """A yes sent with no question (no assistant message, no ``hatchway-operation-id``) while
    nothing awaits confirmation, while an operation of the conversation executes or less than this
    long after it finished, is a duplicate of that confirmation: answered with its outcome."""
    duplicate_wait_seconds: Annotated[float, Field(gt=0)] = 60.0
    """How long a duplicate yes waits for the outcome of an operation that is still executing
    before it answers that it is (never longer than the run's deadline)."""


def _unknown_arg(arg: str, args: dict[str, Any]) -> str:
    known = ", ".join(args) or "none declared"
    return f"{arg!r} is not an argument of the tool's args_schema (known: {known})"
