"""Every operation of the `Client` interface, declared once: a frozen dataclass whose fields are its arguments.

A declaration knows its arguments, their limits and defaults (pydantic `Annotated[..., Field(...)]`: the
service validates a request body into the dataclass itself, and the OpenAPI request schema is the
dataclass's JSON schema, under the name in `schema`; in process, `_check_count` reads the same bounds, and
the clients' named methods take their defaults from the class, `ops.History.limit`), its result (`decode`:
the service's JSON back into the result type; `answer`: the result as the service sends it), whether it
mutates (a write: Idempotency-Key, refused while the service drains), who may call it (`auth`, `viewer`),
its HTTP route (`route`: method, path, ok status, errors, tags, summary), the MCP / model-API tool that
carries it (`tool`, None if none), and `apply`, its one execution against the engine (an `Engine`: the
coordinator and the shape of the sessions it acts as; no client). The adapters are made from these:

- the service's routes and OpenAPI document (server/routes.py: `Route.of(operation)`);
- `HttpClient`'s requests (client/calls.py: `Calls.run(op)`);
- `LocalClient.run(op)` (`op.apply(engine, session)`), `HttpClient.run(op)`, `AsyncClient.run(op)`; the
  named methods (`Client` in base.py, `AsyncClient` in aio.py) only build the declaration.

Write options travel as fields: `policy` and `match` are arguments of the writes that take them, so one
client (and one service) serves every combination.

Adding an operation: its declaration here (with the engine method its `apply` calls), one line in `Client`
(base.py) and one in `AsyncClient` (aio.py), one in `BoundSession` / `AsyncSession` if a session calls it,
its tool (tools/) and its command (cli/) where it has them. `history` touches 8 places in 6 files
(operations.py, engine/coordinator.py, client/base.py twice, client/aio.py twice,
tools/coordination_tools.py, cli/history.py); docs/architecture.md has the details."""

from __future__ import annotations

import re
import typing
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import ConfigDict, Field

from coordinator.arguments import SESSION_PATTERN
from coordinator.client.results import EventPage, SessionStatus
from coordinator.disk.fsio import MAX_PATH_CHARS
from coordinator.endpoint import HOOK_PATH
from coordinator.engine import CallOptions, Coordinator, ReadResult, Session, WriteResult
from coordinator.engine.calls import DEFAULT_OPTIONS
from coordinator.engine.options import Match, Policy
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.commit import CommitResult, commit_session
from coordinator.history import HistoryEntry
from coordinator.state.events import ChangeEvent, Notice
from coordinator.state.leases import DEFAULT_TTL_S, MAX_TTL_S, MIN_TTL_S, Lease, normalize_pattern, pattern_regex

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")
_T = TypeVar("_T")  # an operation's result type

MAX_INT = 2**31 - 1
CURSOR_PATTERN = r"^(\$|[0-9]{1,20}(-[0-9]{1,20})?)$"
CURSOR_RE = re.compile(CURSOR_PATTERN)

Auth = Literal["none", "any", "admin"]

# -- the arguments' rules, shared by the declarations ----------------------------------------------------
_STRICT = ConfigDict(strict=True, extra="forbid")
PathArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description="Path relative to the repository root (forward slashes), or absolute inside it.",
    ),
]
SessionArg = Annotated[
    str | None,
    Field(
        pattern=SESSION_PATTERN,
        description="The session to act as. A session token may only name its own session (or omit it); "
        "an admin token may name any session (default: 'admin').",
    ),
]
PolicyArg = Annotated[
    Literal["strict", "rebase"] | None,
    Field(
        description="'strict' refuses an edit of a file that changed since this session's view; 'rebase' "
        "carries it over onto the changes when they do not overlap. Omitted: the coordinator's default.",
    ),
]
MatchArg = Annotated[
    Literal["exact", "flexible"] | None,
    Field(
        description="How old_string is found: 'exact' (Claude Code's Edit; quote-folded too), or 'flexible': "
        "when that fails, a unique match of whole lines ignoring trailing whitespace, then one with the "
        "indentation shifted by a constant (new_string re-indented by the same shift). The answer's `match` "
        "and `match_lines` say which was used. Omitted: the coordinator's default.",
    ),
]
TtlArg = Annotated[float, Field(ge=MIN_TTL_S, le=MAX_TTL_S, description="Seconds until the lease ends.")]
LeaseIdArg = Annotated[str | None, Field(max_length=200)]

_AUTH_ERRORS = (401, 403)
_BODY_ERRORS = (413, 422)
_FILE_ERRORS = (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503)
_WRITE_ERRORS = (*_FILE_ERRORS, 409, 423)
_STATE_ERRORS = (*_AUTH_ERRORS, *_BODY_ERRORS, 503)


@dataclass(frozen=True)
class HttpRoute:
    """Where an operation is served: `query` names the fields a GET takes from the query string."""

    method: str
    path: str
    summary: str
    errors: tuple[int, ...]
    tags: tuple[str, ...] = ("files",)
    ok_status: int = 200
    query: tuple[str, ...] = ()
    operation_id: str = ""  # the OpenAPI operationId and the service's name for it, when not the method's


# The service's own endpoints that HttpClient calls too (no engine operation behind them): each is written
# here once, for the service's route table and for HttpClient's requests.
SESSIONS_ROUTE = HttpRoute(
    "GET", "/v1/sessions", "Sessions seen recently (admin or viewer)", (*_AUTH_ERRORS, 503), tags=("admin",)
)
TOKENS_ROUTE = HttpRoute(
    "POST", "/v1/tokens", "Issue a session or viewer token (admin)", (*_AUTH_ERRORS, *_BODY_ERRORS), tags=("admin",)
)
SHUTDOWN_ROUTE = HttpRoute(
    "POST", "/v1/admin/shutdown", "Stop the service gracefully (admin)", _AUTH_ERRORS, tags=("admin",), ok_status=202
)
HEALTH_ROUTE = HttpRoute(
    "GET", "/v1/health", "Liveness and Redis reachability (no token needed)", (503,), tags=("service",)
)
HOOK_ROUTE = HttpRoute(
    "POST",
    HOOK_PATH,
    "An agent's hook event (claude-code, codex, gemini), answered as that agent's hook expects: always 200, "
    "the decision in the body (?answer=command: a command hook's exit code and output; ?answer=plain: the "
    "same as text); the event's session's token or the admin token",
    (404,),
    tags=("hooks",),
)


# -- decoding the service's JSON ---------------------------------------------------------------------------
_FIELDS: dict[type, tuple[tuple[tuple[str, bool], ...], frozenset[str], tuple[str, ...], bool]] = {}


def build(cls: type[_R], data: Mapping[str, Any]) -> _R:
    """A result type (a frozen dataclass) from its JSON form: JSON arrays back to the tuples the dataclass
    holds; fields this version does not know are left out (a newer service may send more).

    The usual answer names exactly the type's fields: then the instance is filled directly (what `__init__`
    would set, as `engine.results.evolve` does), for a type whose `__init__` does nothing more (no
    `__post_init__`, every field an init field, no slots); any other answer goes through `__init__`."""
    spec = _FIELDS.get(cls)
    if spec is None:
        spec = _FIELDS[cls] = _spec_of(cls)
    fields_, names, tuples, direct = spec
    if direct and data.keys() == names:
        made = object.__new__(cls)
        own = made.__dict__
        own.update(data)
        for name in tuples:
            value = own[name]
            if value.__class__ is list:
                own[name] = _tupled(value) if value else ()
        return made
    values = {name: (_tupled(data[name]) if tup else data[name]) for name, tup in fields_ if name in data}
    return cls(**values)


def _spec_of(cls: type) -> tuple[tuple[tuple[str, bool], ...], frozenset[str], tuple[str, ...], bool]:
    found = fields(cls)
    spec = tuple((f.name, "tuple" in str(f.type)) for f in found)
    direct = (
        not hasattr(cls, "__post_init__")
        and "__slots__" not in cls.__dict__
        and all(f.init for f in found)
        and len(found) == len(getattr(cls, "__dataclass_fields__", {}))  # no InitVar or ClassVar pseudo-fields
    )
    return spec, frozenset(name for name, _ in spec), tuple(name for name, tup in spec if tup), direct


def _tupled(value: Any) -> Any:
    if value.__class__ is not list:
        return value
    return tuple([_tupled(v) for v in value]) if value else ()


def _leases(data: Mapping[str, Any]) -> list[Lease]:
    return [build(Lease, x) for x in data["leases"]]


def _events(data: Mapping[str, Any]) -> list[ChangeEvent]:
    return [build(ChangeEvent, e) for e in data["events"]]


def _leases_answer(found: list[Lease]) -> dict[str, Any]:
    return {"leases": [x.to_dict() for x in found]}


# -- the declarations ----------------------------------------------------------------------------------------
_BODY_FIELDS: dict[type, tuple[str, ...]] = {}  # each declaration's field names, in order (`Operation.body`)


def tokens_taken(auth: Auth, viewer: bool) -> str:
    """The tokens a call that `auth` and `viewer` admit takes, in words: the one wording of the service's "which
    token" refusals and of the commands' --token help."""
    roles = ["the admin token"] if auth == "admin" else ["a session token (for its own session)", "the admin token"]
    if viewer:
        roles.append("a viewer token")
    return ", ".join(roles[:-1]) + " or " + roles[-1] if len(roles) > 1 else roles[0]


class Operation(Generic[_T]):
    """What every declaration has (see the module docstring). Subclasses are frozen dataclasses."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT
    name: ClassVar[str]  # the operationId, and the client method's name
    schema: ClassVar[str]  # the request schema's name in the OpenAPI document
    route: ClassVar[HttpRoute]
    auth: ClassVar[Auth] = "any"
    viewer: ClassVar[bool] = False  # a viewer token may call it: inspection only
    mutates: ClassVar[bool] = False
    retry_safe: ClassVar[bool] = True  # a read that may be sent again (a mutation is, with an Idempotency-Key)
    long_poll: ClassVar[bool] = False
    tool: ClassVar[str | None] = None
    result: ClassVar[Any]  # the result type (a dataclass, or a pydantic answer model named by the service)

    def apply(self, engine: Engine, session: str | None) -> _T:
        """Run against the engine, acting as `session` (the service's acting session; in process the
        declaration's own)."""
        raise NotImplementedError

    def answer(self, engine: Engine, result: Any) -> Any:
        """The result as the service's JSON answer (before dataclasses are made plain)."""
        return result

    @classmethod
    def decode(cls, data: dict[str, Any]) -> _T:
        """The service's JSON answer back into the result."""
        return build(cls.result, data)  # type: ignore[no-any-return]  # `result` is the type _T names

    def acting(self) -> str | None:
        """The session whose token carries the call (None: the admin token)."""
        return None if self.auth == "admin" else getattr(self, "session", None)

    def body(self) -> dict[str, Any] | None:
        """The JSON request body: every field that is set (None: the service's default)."""
        if self.route.method == "GET":
            return None
        names = _BODY_FIELDS.get(type(self))
        if names is None:
            names = _BODY_FIELDS[type(self)] = tuple(f.name for f in fields(self))  # type: ignore[arg-type]
        return {name: v for name in names if (v := getattr(self, name)) is not None}

    def params(self) -> dict[str, str] | None:
        found = {name: str(v) for name in self.route.query if (v := getattr(self, name)) is not None}
        return found or None

    def key(self) -> str | None:
        """A fresh Idempotency-Key for a mutation (kept across the retries of one call)."""
        return uuid.uuid4().hex if self.mutates else None


@dataclass(frozen=True, slots=True)
class Engine:
    """What a declaration's `apply` runs against: the coordinator, and how the sessions it acts as are shaped
    (`policy`, `match`: None takes the coordinator's; a write's own `policy` / `match` field wins;
    `options`: engine/calls.py). `LocalClient` holds one; the service holds one per `CallOptions`."""

    coord: Coordinator
    policy: Policy | None = None
    match: Match | None = None
    options: CallOptions = DEFAULT_OPTIONS

    def session(self, session: str | None, op: object = None) -> Session:
        """The engine session that runs `op` as `session`, the op's write options over these."""
        assert session is not None
        policy = getattr(op, "policy", None) or self.policy
        return self.coord.session(session, policy, getattr(op, "match", None) or self.match, options=self.options)

    def shaped(self, options: CallOptions) -> Engine:
        """The same engine, its sessions' calls shaped by `options`."""
        return Engine(self.coord, self.policy, self.match, options)


_BOUNDS: dict[tuple[type, str], Any] = {}


def _most(op: type, name: str) -> Any:
    """The upper bound (`Field(le=...)`) the declaration `op` gives its field `name`."""
    found = _BOUNDS.get((op, name))
    if found is None:
        hint = typing.get_type_hints(op, include_extras=True)[name]
        rules = (rule for info in getattr(hint, "__metadata__", ()) for rule in getattr(info, "metadata", ()))
        found = _BOUNDS[op, name] = next(r.le for r in rules if getattr(r, "le", None) is not None)
    return found


def _check_count(op: Operation[Any], name: str) -> int:
    """`op.<name>`, a whole number from 1 to the declaration's bound (in process nothing else checks it)."""
    value = getattr(op, name)
    most = _most(type(op), name)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a whole number from 1 to {most}.")
    return value


@dataclass(frozen=True, kw_only=True)
class Read(Operation[ReadResult]):
    name: ClassVar[str] = "read"
    schema: ClassVar[str] = "ReadRequest"
    route: ClassVar[HttpRoute] = HttpRoute("POST", "/v1/read", "Read lines of a text file", (*_FILE_ERRORS, 409, 423))
    tool: ClassVar[str | None] = "read_file"
    result: ClassVar[Any] = ReadResult

    path: PathArg
    offset: Annotated[int | None, Field(ge=0, le=MAX_INT, description="1-based first line.")] = None
    limit: Annotated[int | None, Field(ge=1, le=MAX_INT, description="Number of lines.")] = None
    session: SessionArg = None
    policy: PolicyArg = None

    def apply(self, engine: Engine, session: str | None) -> ReadResult:
        return engine.session(session, self).read(self.path, offset=self.offset, limit=self.limit)


class _Write(Operation[_T]):
    mutates: ClassVar[bool] = True
    result: ClassVar[Any] = WriteResult
    route: ClassVar[HttpRoute]


@dataclass(frozen=True, kw_only=True)
class Write(_Write[WriteResult]):
    name: ClassVar[str] = "write"
    schema: ClassVar[str] = "WriteRequest"
    route: ClassVar[HttpRoute] = HttpRoute("POST", "/v1/write", "Create or overwrite a file", _WRITE_ERRORS)
    tool: ClassVar[str | None] = "write_file"

    path: PathArg
    content: Annotated[str, Field(description="The whole new content, written as given.")]
    session: SessionArg = None
    policy: PolicyArg = None

    def apply(self, engine: Engine, session: str | None) -> WriteResult:
        return engine.session(session, self).write(self.path, self.content)


@dataclass(frozen=True, kw_only=True)
class Edit(_Write[WriteResult]):
    name: ClassVar[str] = "edit"
    schema: ClassVar[str] = "EditRequest"
    route: ClassVar[HttpRoute] = HttpRoute("POST", "/v1/edit", "Replace old_string with new_string", _WRITE_ERRORS)
    tool: ClassVar[str | None] = "edit_file"

    path: PathArg
    old_string: Annotated[str, Field(description="Exact text to replace ('' creates a missing or empty file).")]
    new_string: Annotated[str, Field(description="The replacement text.")]
    replace_all: bool = False
    session: SessionArg = None
    policy: PolicyArg = None
    match: MatchArg = None

    def apply(self, engine: Engine, session: str | None) -> WriteResult:
        s = engine.session(session, self)
        return s.edit(self.path, self.old_string, self.new_string, replace_all=self.replace_all)


@dataclass(frozen=True, kw_only=True)
class EditItem:
    # One edit of a multi_edit, as the service reads it. (No docstring: it would become the schema's
    # description, and the request schemas stay as published.)
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT
    old_string: str
    new_string: str
    replace_all: bool = False


@dataclass(frozen=True, kw_only=True)
class MultiEdit(_Write[WriteResult]):
    # `edits`: EditItems from the service; from Python, the dicts the engine's argument rules check
    # (arguments.py owns that check, messages included). No docstring: see EditItem.
    name: ClassVar[str] = "multi_edit"
    schema: ClassVar[str] = "MultiEditRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/multi_edit", "Several edits of one file, all or nothing", _WRITE_ERRORS
    )
    tool: ClassVar[str | None] = "multi_edit"

    path: PathArg
    edits: Annotated[list[EditItem], Field(min_length=1, description="Applied in order, all or nothing.")]
    session: SessionArg = None
    policy: PolicyArg = None
    match: MatchArg = None

    def apply(self, engine: Engine, session: str | None) -> WriteResult:
        return engine.session(session, self).multi_edit(self.path, self.edit_dicts())

    def edit_dicts(self) -> list[dict[str, Any]]:
        return [e if isinstance(e, dict) else _item_dict(e) for e in self.edits]

    def body(self) -> dict[str, Any] | None:
        found = super().body()
        assert found is not None
        found["edits"] = self.edit_dicts()
        return found


def _item_dict(item: EditItem) -> dict[str, Any]:
    return {"old_string": item.old_string, "new_string": item.new_string, "replace_all": item.replace_all}


@dataclass(frozen=True, kw_only=True)
class Undo(_Write[WriteResult]):
    name: ClassVar[str] = "undo"
    schema: ClassVar[str] = "UndoRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST",
        "/v1/undo",
        "Revert one recorded write's change, keeping later writes (a session token: its own writes only)",
        _WRITE_ERRORS,
    )
    tool: ClassVar[str | None] = "undo"

    path: PathArg
    version: Annotated[
        int | None,
        Field(
            ge=1,
            le=MAX_INT,
            description="Revert this version's change, keeping every later write. Omitted: this session's "
            "newest write of the file still in effect (repeated calls step back). Undoing a version written "
            "by another session needs the admin token.",
        ),
    ] = None
    session: SessionArg = None
    policy: PolicyArg = None

    def apply(self, engine: Engine, session: str | None) -> WriteResult:
        return engine.session(session, self).undo(self.path, version=self.version)


@dataclass(frozen=True, kw_only=True)
class Redo(_Write[WriteResult]):
    name: ClassVar[str] = "redo"
    schema: ClassVar[str] = "RedoRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/redo", "Bring back the change of the session's newest undo of a file", _WRITE_ERRORS
    )
    tool: ClassVar[str | None] = "redo"

    path: PathArg
    session: SessionArg = None
    policy: PolicyArg = None

    def apply(self, engine: Engine, session: str | None) -> WriteResult:
        return engine.session(session, self).redo(self.path)


@dataclass(frozen=True, kw_only=True)
class Commit(_Write[CommitResult]):
    name: ClassVar[str] = "commit"
    schema: ClassVar[str] = "CommitRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST",
        "/v1/commit",
        "A git commit of exactly the session's uncommitted writes; the working tree and other sessions' "
        "changes stay as they are",
        (*_STATE_ERRORS, 409),
        tags=("git",),
    )
    tool: ClassVar[str | None] = "commit"
    result: ClassVar[Any] = CommitResult

    message: Annotated[
        str, Field(min_length=1, max_length=65536, description="The commit message (a session trailer is added).")
    ]
    include_others: Annotated[
        bool,
        Field(description="Where the session's change cannot be separated from another session's, commit both."),
    ] = False
    session: SessionArg = None

    def apply(self, engine: Engine, session: str | None) -> CommitResult:
        assert session is not None
        engine.coord.session(session)  # validates the id
        root = str(engine.coord.root)
        return commit_session(root, session, self.message, include_others=self.include_others)


@dataclass(frozen=True, kw_only=True)
class Restore(_Write[WriteResult]):
    name: ClassVar[str] = "restore"
    schema: ClassVar[str] = "RestoreRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST",
        "/v1/admin/restore",
        "Put a whole file back as it was at a version, discarding every later version; the answer's "
        "`discarded` lists them (admin)",
        _WRITE_ERRORS,
        tags=("admin",),
    )
    auth: ClassVar[Auth] = "admin"

    path: PathArg
    to_version: Annotated[
        int | None,
        Field(
            ge=0,
            le=MAX_INT,
            description="Put back the content right after this version (0: before the first recorded version).",
        ),
    ] = None
    before_version: Annotated[
        int | None, Field(ge=1, le=MAX_INT, description="Put back the content right before this version.")
    ] = None
    session: Annotated[
        str | None,
        Field(
            pattern=SESSION_PATTERN,
            description="The session the restore runs as (default 'admin'); it reads the file first, so a write "
            "landing meanwhile is refused as stale, never discarded unseen.",
        ),
    ] = None

    def apply(self, engine: Engine, session: str | None) -> WriteResult:
        # The service runs it as the acting session; in process, as the declaration's (default "operator").
        by = session or "operator"
        return engine.coord.restore(self.path, self.to_version, before_version=self.before_version, session=by)


@dataclass(frozen=True, kw_only=True)
class History(Operation[list[HistoryEntry]]):
    name: ClassVar[str] = "history"
    schema: ClassVar[str] = "HistoryRequest"
    # Any token: a session may see the history of every file of the repository (docs/http.md, "Tokens").
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST",
        "/v1/history",
        "Recorded versions of a file, newest first: who wrote which lines when (no contents)",
        (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503),
    )
    viewer: ClassVar[bool] = True
    tool: ClassVar[str | None] = "history"
    result: ClassVar[Any] = list[HistoryEntry]

    path: PathArg
    limit: Annotated[int, Field(ge=1, le=10_000, description="Newest entries to return.")] = 100

    def apply(self, engine: Engine, session: str | None) -> list[HistoryEntry]:
        return engine.coord.history(self.path)[: _check_count(self, "limit")]

    def answer(self, engine: Engine, result: list[HistoryEntry]) -> Any:
        return {"path": engine.coord.resolve(self.path).key, "entries": [e.to_dict() for e in result]}

    @classmethod
    def decode(cls, data: dict[str, Any]) -> list[HistoryEntry]:
        return [build(HistoryEntry, e) for e in data["entries"]]


class _LeasesAnswered(Operation[list[Lease]]):
    """A declaration whose result is a list of leases, answered as `{"leases": [...]}`."""

    result: ClassVar[Any] = list[Lease]

    def answer(self, engine: Engine, result: list[Lease]) -> Any:
        return _leases_answer(result)

    @classmethod
    def decode(cls, data: dict[str, Any]) -> list[Lease]:
        return _leases(data)


@dataclass(frozen=True, kw_only=True)
class LeaseOp(_LeasesAnswered):
    name: ClassVar[str] = "lease"
    schema: ClassVar[str] = "LeaseRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/leases", "Reserve paths or globs for a while, all or none", (*_STATE_ERRORS, 423),
        tags=("leases",),
    )  # fmt: skip
    retry_safe: ClassVar[bool] = False  # a lost answer may hide a grant: asking again would be refused
    tool: ClassVar[str | None] = "lease"

    paths: Annotated[
        list[str], Field(min_length=1, max_length=100, description="Paths or globs (`src/**/*.py`, `docs/`).")
    ]
    mode: Literal["exclusive", "shared"] = "exclusive"
    ttl_s: TtlArg = DEFAULT_TTL_S
    session: SessionArg = None

    def apply(self, engine: Engine, session: str | None) -> list[Lease]:
        return engine.session(session, self).lease(self.paths, mode=self.mode, ttl_s=self.ttl_s)


@dataclass(frozen=True, kw_only=True)
class Renew(_LeasesAnswered):
    name: ClassVar[str] = "renew"
    schema: ClassVar[str] = "RenewRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/leases/renew", "Extend one or all of the session's leases", (*_STATE_ERRORS, 423),
        tags=("leases",),
    )  # fmt: skip
    tool: ClassVar[str | None] = "renew"

    lease_id: Annotated[str | None, Field(max_length=200, description="Omitted: every lease of the session.")] = None
    ttl_s: Annotated[
        float, Field(ge=MIN_TTL_S, le=MAX_TTL_S, description="The lease then ends this long from now.")
    ] = DEFAULT_TTL_S
    session: SessionArg = None

    def apply(self, engine: Engine, session: str | None) -> list[Lease]:
        return engine.session(session, self).renew(self.lease_id, ttl_s=self.ttl_s)


@dataclass(frozen=True, kw_only=True)
class Release(Operation[int]):
    name: ClassVar[str] = "release"
    schema: ClassVar[str] = "ReleaseRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/leases/release", "End the session's leases (one, on a pattern, or all)", _STATE_ERRORS,
        tags=("leases",),
    )  # fmt: skip
    tool: ClassVar[str | None] = "release"
    result: ClassVar[Any] = int

    lease_id: Annotated[str | None, Field(max_length=200, description="One lease by id.")] = None
    pattern: Annotated[str | None, Field(max_length=MAX_PATH_CHARS, description="The leases on this pattern.")] = None
    session: SessionArg = None

    def apply(self, engine: Engine, session: str | None) -> int:
        return engine.session(session, self).release(self.lease_id, self.pattern)

    def answer(self, engine: Engine, result: int) -> Any:
        return {"released": result}

    @classmethod
    def decode(cls, data: dict[str, Any]) -> int:
        return int(data["released"])


@dataclass(frozen=True, kw_only=True)
class Leases(_LeasesAnswered):
    """GET: the session comes from the query string (`?session=`), validated by the service."""

    name: ClassVar[str] = "leases"
    schema: ClassVar[str] = ""
    route: ClassVar[HttpRoute] = HttpRoute(
        "GET", "/v1/leases", "Live leases (all, or one session's with ?session=)", _STATE_ERRORS,
        tags=("leases",), query=("session",),
    )  # fmt: skip
    viewer: ClassVar[bool] = True
    tool: ClassVar[str | None] = "leases"

    session: str | None = None

    def apply(self, engine: Engine, session: str | None) -> list[Lease]:
        if self.session is None:
            return engine.coord.leases()
        return engine.session(self.session, self).leases()

    def answer(self, engine: Engine, result: list[Lease]) -> Any:
        return {"leases": result}


@dataclass(frozen=True, kw_only=True)
class BreakLease(_LeasesAnswered):
    name: ClassVar[str] = "break_lease"
    schema: ClassVar[str] = "BreakLeaseRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/admin/leases/break", "End a lease, or all of a session's, whoever holds it (admin)",
        _STATE_ERRORS, tags=("admin",),
    )  # fmt: skip
    auth: ClassVar[Auth] = "admin"

    lease_id: Annotated[str | None, Field(max_length=200, description="End this lease, whoever holds it.")] = None
    session: Annotated[str | None, Field(pattern=SESSION_PATTERN, description="End every lease of this session.")] = (
        None
    )

    def apply(self, engine: Engine, session: str | None) -> list[Lease]:
        if self.lease_id is None and self.session is None:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give the lease id or the session whose leases end.")
        return engine.coord.break_lease(lease_id=self.lease_id, session=self.session)


POLL_SLACK_S = 10.0  # a long poll's read timeout: its wait plus this


@dataclass(frozen=True, kw_only=True)
class PollEvents(Operation[EventPage]):
    name: ClassVar[str] = "poll_events"
    schema: ClassVar[str] = "EventsRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/events", "Change events after a cursor; waits up to wait_s for the first (long poll)",
        _STATE_ERRORS, tags=("events",), operation_id="events",
    )  # fmt: skip
    viewer: ClassVar[bool] = True
    long_poll: ClassVar[bool] = True
    result: ClassVar[Any] = EventPage

    since: Annotated[
        str | None,
        Field(
            pattern=CURSOR_PATTERN,
            description="'$' or omitted: events from now on; '0': from the oldest kept; else the cursor of the "
            "previous answer (or an event id).",
        ),
    ] = None
    paths: Annotated[list[str] | None, Field(max_length=100, description="Only paths matching these globs.")] = None
    wait_s: Annotated[
        float,
        Field(
            ge=0,
            le=60,
            description="Wait up to this long for the first event (long poll; the service "
            "may wait less, see `serve --max-poll-wait`).",
        ),
    ] = 0.0
    limit: Annotated[int, Field(ge=1, le=1000)] = 200

    def apply(self, engine: Engine, session: str | None) -> EventPage:
        return _poll(engine.coord, self)

    def answer(self, engine: Engine, result: EventPage) -> Any:
        return result.to_dict()

    def body(self) -> dict[str, Any] | None:
        found = super().body()
        assert found is not None
        if not self.paths:
            found.pop("paths", None)
        return found

    @classmethod
    def decode(cls, data: dict[str, Any]) -> EventPage:
        return EventPage(tuple(_events(data)), str(data["cursor"]))

    @property
    def read_timeout(self) -> float:
        return self.wait_s + POLL_SLACK_S


def _poll(coord: Coordinator, op: PollEvents) -> EventPage:
    """Events after `op.since` ("$" or None: from now; "0": the oldest kept), waiting up to `op.wait_s` for
    the first. The cursor moves past every event read, shown or filtered out."""
    limit = _check_count(op, "limit")
    wait: object = op.wait_s  # checked as it may come (JSON, a tool call): a bool is not a number here
    most = _most(PollEvents, "wait_s")
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= most:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"wait_s must be between 0 and {most:.0f}.")
    since = op.since
    if since is not None and not CURSOR_RE.fullmatch(since):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"since must be '$' (from now), '0' (the oldest kept) or an event id such as '1700000000000-0', "
            f"not {since[:40]!r}.",
        )
    cursor = since
    if since is None or since == "$":
        newest = coord.recent_events(1)
        cursor = newest[-1].id if newest else "0-0"
    got: list[ChangeEvent] = []
    stream = coord.events(since=cursor, paths=None, timeout_s=max(float(wait), 0.001), stop=lambda: bool(got))
    matchers = _matchers(coord, op.paths)
    last = cursor
    for event in stream:
        last = event.id
        if matchers is None or any(m.fullmatch(event.path) for m in matchers):
            got.append(event)
            if len(got) >= limit:
                break
    return EventPage(tuple(got), str(last))


def _matchers(coord: Coordinator, paths: Sequence[str] | None) -> list[Any] | None:
    if not paths:
        return None
    return [pattern_regex(normalize_pattern(p, coord.root)) for p in paths]


@dataclass(frozen=True, kw_only=True)
class RecentEvents(Operation[list[ChangeEvent]]):
    name: ClassVar[str] = "recent_events"
    schema: ClassVar[str] = "RecentEventsRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/events/recent", "The newest change events, oldest first", _STATE_ERRORS, tags=("events",)
    )
    viewer: ClassVar[bool] = True
    result: ClassVar[Any] = list[ChangeEvent]

    count: Annotated[int, Field(ge=1, le=1000)] = 50

    def apply(self, engine: Engine, session: str | None) -> list[ChangeEvent]:
        return engine.coord.recent_events(_check_count(self, "count"))

    def answer(self, engine: Engine, result: list[ChangeEvent]) -> Any:
        return {"events": [e.to_dict() for e in result], "cursor": result[-1].id if result else "0-0"}

    @classmethod
    def decode(cls, data: dict[str, Any]) -> list[ChangeEvent]:
        return _events(data)


@dataclass(frozen=True, kw_only=True)
class Notices(Operation[Notice | None]):
    name: ClassVar[str] = "notices"
    schema: ClassVar[str] = "NoticesRequest"
    route: ClassVar[HttpRoute] = HttpRoute(
        "POST", "/v1/notices", "Files the session read that others have written since", _STATE_ERRORS,
        tags=("sessions",),
    )  # fmt: skip
    result: ClassVar[Any] = Notice

    session: SessionArg = None

    def apply(self, engine: Engine, session: str | None) -> Notice | None:
        assert session is not None
        return engine.coord.notices(session)

    def answer(self, engine: Engine, result: Notice | None) -> Any:
        if result is None:
            return {"notice": None}
        return {"notice": {"paths": list(result.paths), "writers": list(result.writers), "text": result.text}}

    @classmethod
    def decode(cls, data: dict[str, Any]) -> Notice | None:
        found = data.get("notice")
        return None if found is None else Notice(tuple(found["paths"]), tuple(found["writers"]))


@dataclass(frozen=True, kw_only=True)
class Status(Operation[SessionStatus]):
    """GET /v1/session: the service adds the token's role and expiry to what the engine knows."""

    name: ClassVar[str] = "status"
    schema: ClassVar[str] = ""
    route: ClassVar[HttpRoute] = HttpRoute(
        "GET", "/v1/session", "The calling session's status and leases", (*_AUTH_ERRORS, 422, 503),
        tags=("sessions",), query=("session",), operation_id="session",
    )  # fmt: skip
    result: ClassVar[Any] = SessionStatus

    session: str | None = None

    def apply(self, engine: Engine, session: str | None) -> SessionStatus:
        assert session is not None
        leases = tuple(engine.session(session, self).leases())
        return SessionStatus(session, engine.coord.last_seen(session), leases)

    @classmethod
    def decode(cls, data: dict[str, Any]) -> SessionStatus:
        leases = tuple(build(Lease, x) for x in data.get("leases", ()))
        return SessionStatus(str(data["session"]), data.get("last_seen"), leases)


# In the order the service lists them (the OpenAPI document's order).
OPERATIONS: tuple[type[Operation[Any]], ...] = (
    Read, Write, Edit, MultiEdit, Undo, Redo, Commit, Restore, History, LeaseOp, Renew, Release, Leases,
    BreakLease, PollEvents, RecentEvents, Notices, Status,
)  # fmt: skip
BY_NAME: dict[str, type[Operation[Any]]] = {op.name: op for op in OPERATIONS}
