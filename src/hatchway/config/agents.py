"""An agent's tool files: ``tools.yaml`` (the contracts the model sees) and ``tool_policies.yaml``.

Multi-item operations need no key of their own (seed ``000``): a scalar ``subject`` is as valid as
``items: {type: array}``; the validator and the MCP tool resolve and execute the items, Hatchway
keeps the state, the confirmation and the per-item verdict. ``multi_item``, ``multi_item_strategy``
and ``fan_out`` are therefore rejected wherever they appear, with a message that says so.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

from pydantic import AliasChoices, ConfigDict, Field, field_validator, model_validator

from hatchway.config.loading import StrictModel
from hatchway.vault.names import ref_problem

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


class Approvers(AgentFileModel):
    """Who may approve: exactly one of ``group``, ``role`` or ``end_user``."""

    group: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """A group of the organisation: a value of the SSO ``groups_claim``, or of a verified user
    token's groups claim (``access.end_users.groups_claim``)."""
    role: Literal["app", "admin", "platform"] | None = None
    """A role of the organisation: a person whose role there is this one or broader (``app`` <
    ``admin`` < ``platform``; a ``viewer`` never approves)."""
    end_user: Literal[True] | None = None
    """The end user who asked (today's confirmation in the conversation)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Approvers:
        given = [k for k in ("group", "role", "end_user") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of group, role or end_user (got " + (", ".join(given) or "none") + ")"
            )
        return self

    def label(self) -> str:
        if self.group is not None:
            return f"group {self.group}"
        if self.role is not None:
            return f"role {self.role}"
        return "the end user"


class ApprovalRule(AgentFileModel):
    """One rule of a tool's ``approvals``: the first whose ``when`` holds decides who approves."""

    name: Annotated[str, Field(pattern=_NAME)] | None = None
    """Shown to approvers and in the audit trail (default ``rule-<index>``)."""
    when: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """A CEL expression (https://cel.dev) over ``arguments`` (the resolved arguments), ``items``
    (the validator's items), ``tool``, ``tainted`` (untrusted tool output preceded the call),
    ``tainted_by`` (those tools) and ``requester`` (the end user, or ""). Absent: always. An
    expression that cannot be evaluated for a call (a missing argument, a type mismatch) counts as
    true: the call waits for approval rather than run unapproved."""
    approvers: Approvers
    """Who approves."""
    required: Annotated[int, Field(ge=1, le=10)] = 1
    """How many distinct approvers must approve (four eyes: 2)."""
    exclude_requester: bool = True
    """The end user who asked cannot be one of the approvers."""
    timeout_seconds: Annotated[float, Field(gt=0, le=30 * 86400)] = 86400.0
    """How long the approvers have; then ``on_timeout``."""
    on_timeout: Literal["cancel", "escalate"] = "cancel"
    """``cancel``: the operation is CANCELLED (reason ``approval timed out``); ``escalate``: it goes
    to ``escalate_to`` for another ``escalation_timeout_seconds``, then is cancelled."""
    escalate_to: Approvers | None = None
    """Who approves once the first approvers' time is up (``on_timeout: escalate``)."""
    escalation_timeout_seconds: Annotated[float, Field(gt=0, le=30 * 86400)] | None = None
    """How long the escalation's approvers have (default ``timeout_seconds``)."""
    notify: list[str] = Field(default_factory=list, max_length=50)
    """Arguments named in notifications (webhooks, Slack, Teams); no other argument, nor anything a
    tool returned, leaves the gateway in one."""

    @model_validator(mode="after")
    def _escalation(self) -> ApprovalRule:
        if self.on_timeout == "escalate" and self.escalate_to is None:
            raise ValueError("escalate_to: required when on_timeout is escalate")
        if self.escalate_to is not None and self.escalate_to.end_user:
            raise ValueError("escalate_to.end_user: an escalation goes to a group or a role")
        if self.approvers.end_user and (self.required != 1 or self.on_timeout != "cancel"):
            raise ValueError(
                "approvers.end_user: the end user confirms alone (required 1, on_timeout cancel)"
            )
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
    approvals: list[ApprovalRule] = Field(default_factory=list, max_length=20)
    """Who must approve before it executes, rule by rule (the first whose ``when`` holds); none
    holding, or none given: the end user confirms, as ``require_confirmation`` says."""

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


ApprovalEvent = Literal["approval.requested", "approval.escalated", "approval.decided"]
APPROVAL_EVENTS: tuple[ApprovalEvent, ...] = get_args(ApprovalEvent)
_WEBHOOK_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ApprovalWebhook(StrictModel):
    """One receiver of signed approval notifications (docs/operations.md, "Approval notifications")."""

    name: Annotated[str, Field(pattern=_WEBHOOK_NAME)]
    """Names the webhook in the delivery log."""
    url: str
    """Where the notifications are POSTed (http or https; redirects are not followed). Neither the
    delivery log nor a log line holds more of it than its scheme and host: a Slack or Teams
    incoming-webhook URL is itself a credential."""
    format: Literal["generic", "slack", "teams"] = "generic"
    """``generic`` (Hatchway's JSON), ``slack`` (Block Kit) or ``teams`` (an Adaptive Card)."""
    secret: str | None = None
    """The HMAC-SHA256 key of ``X-Hatchway-Signature``: ``env:NAME`` or ``secret.<name>`` (from the
    vault of the operation's organisation, else of the ``system`` organisation). None: unsigned (a
    Slack or Teams incoming webhook, whose URL is its secret)."""
    events: list[ApprovalEvent] = Field(default=list(APPROVAL_EVENTS), min_length=1)
    """Which events it receives: ``approval.requested``, ``approval.escalated``, ``approval.decided``."""
    orgs: list[str] = Field(default_factory=list)
    """Organisation names or ids it is for; empty: every organisation."""
    groups: list[str] = Field(default_factory=list)
    """Only operations whose current approvers are one of these groups or roles; empty: all."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s?#]+", value):
            raise ValueError(
                f"must be an http(s) URL such as https://hooks.example.com/hatchway (got {value!r})"
            )
        return value

    @field_validator("secret")
    @classmethod
    def _secret_ref(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.startswith("env:"):
            if not value[4:]:
                raise ValueError("env: needs a variable name, e.g. env:APPROVAL_WEBHOOK_SECRET")
            return value
        if value.startswith("secret."):
            if problem := ref_problem(value):
                raise ValueError(problem)
            return value
        raise ValueError("must be env:NAME or secret.<name>: a literal key would sit in hatchway.yaml")


class ApprovalSettings(StrictModel):
    """``operations.approvals:`` in hatchway.yaml: where approvers are told, and how deliveries retry."""

    inbox_url: str | None = None
    """The dashboard's public base URL (``https://gw.example.com``): notifications link to
    ``{inbox_url}/ui/#/approvals/<operation id>``. None: the links are relative."""
    webhooks: list[ApprovalWebhook] = Field(default_factory=list)
    """Receivers of signed notifications; none: no notification is sent."""
    delivery_attempts: Annotated[int, Field(ge=1, le=50)] = 8
    """Attempts per delivery (the first included); then it is ``failed``."""
    delivery_backoff_seconds: Annotated[float, Field(gt=0)] = 2.0
    """The wait before the first retry, doubled after each attempt; each wait is between half of
    that and all of it (jitter), so waits never shrink."""
    delivery_max_backoff_seconds: Annotated[float, Field(gt=0)] = 600.0
    """The longest wait between two attempts (a receiver's ``Retry-After`` included)."""
    delivery_timeout_seconds: Annotated[float, Field(gt=0)] = 10.0
    """Whole-request timeout of one attempt."""
    dispatch_interval_seconds: Annotated[float, Field(gt=0)] = 1.0
    """How often each replica looks for deliveries that are due."""
    max_payload_arguments: Annotated[int, Field(ge=0)] = 20
    """At most this many of the arguments the policy's ``notify`` names go into a notification."""

    @field_validator("inbox_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s?#]+", value):
            raise ValueError(f"must be an http(s) URL such as https://gw.example.com (got {value!r})")
        return value.rstrip("/") if value is not None else None

    @model_validator(mode="after")
    def _unique_names(self) -> ApprovalSettings:
        seen: set[str] = set()
        for i, hook in enumerate(self.webhooks):
            if hook.name in seen:
                raise ValueError(f"webhooks[{i}].name: {hook.name!r} is used by another webhook")
            seen.add(hook.name)
            if hook.format != "generic" and self.inbox_url is None:
                raise ValueError(
                    f"webhooks[{i}]: a {hook.format} message's button needs an absolute link: set "
                    "inbox_url (the dashboard's public base URL, e.g. https://gw.example.com)"
                )
        return self


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
    approval_sweep_seconds: Annotated[float, Field(gt=0)] = 5.0
    """How often each replica applies the timeouts of operations awaiting approval (cancel or
    escalate, tool_policies.yaml ``approvals[].timeout_seconds``)."""
    approval_wait_seconds: Annotated[float, Field(ge=0)] = 3600.0
    """How long a background response waits, inside the tool call, for an operation's approvers
    before it completes saying the operation awaits approval (its outcome then comes with the
    conversation's next turn). The time waited does not count against the run's deadline, and the
    job queue's backstop timeout grows by it; a waiting run holds its worker's slot. A request that
    is not background never waits: it answers at once that approval is pending."""
    duplicate_wait_seconds: Annotated[float, Field(gt=0)] = 60.0
    """How long a duplicate yes waits for the outcome of an operation that is still executing
    before it answers that it is (never longer than the run's deadline)."""
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    """Notifications of approvals: the inbox's address and the signed webhooks."""


def _unknown_arg(arg: str, args: dict[str, Any]) -> str:
    known = ", ".join(args) or "none declared"
    return f"{arg!r} is not an argument of the tool's args_schema (known: {known})"
