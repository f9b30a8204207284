"""The KG and MIRAGE as Model Context Protocol tools, on the official ``mcp`` SDK: ``mirage-kg mcp --store DIR``
speaks it over stdio (for an agent that starts its tools as subprocesses), and ``serve`` over streamable HTTP at
``/mcp`` (behind the same token and limits as the rest of the API).

The tools and their JSON schemas (the SDK derives them from the annotated signatures below):

- ``link(text, top)``: mentions of KG entities in a text, ranked (as ``mirage-kg link --json``);
- ``anchor(entity, k, relations, direction)``: an entity's typed neighbourhood (``query anchor --json``);
- ``bridge(source, target, max_hops, max_paths)``: every typed path between two entities (``query bridge --json``);
- ``sparql(query)``: a read-only SPARQL query, guarded as ``query sparql`` is (updates are refused);
- ``differential(findings, top)``: the diagnoses that best explain a list of findings (``query differential``),
  where this install has ``mirage_kg.retrieval.differential``;
- ``ask(question, seed)``: MIRAGE's answer (a model runs; off when the server has none): the answer text with how
  grounded it is and the paths it cites, and the whole answer record.

Every tool's result is a JSON object (``structuredContent``) and the same JSON as text. A bad input comes back as
a tool error naming the cause; nothing here writes to the store.

(No ``from __future__ import annotations`` here: the SDK reads the tools' signatures, whose bounds are the
server's limits, at run time.)"""

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
from pydantic import Field

from mirage_kg import InputError, MirageError, anchor_json, bridge_json, check_read_only, link_json, resolve_name, sparql_json

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from mirage_kg import KnowledgeGraph

    from mirage_reason.service.asks import AskService
    from mirage_reason.service.settings import ServiceSettings

__all__ = ["build_mcp", "mcp_http_app", "TOOLS"]

T = TypeVar("T")
TOOLS = ("link", "anchor", "bridge", "sparql", "differential", "ask")
INSTRUCTIONS = ("Tools over a medical knowledge graph (MIRAGE-KG). Find entity ids with `link`, then explore with "
                "`anchor` (neighbourhood) and `bridge` (paths between two entities); `sparql` runs read-only "
                "queries; `ask` answers a question with MIRAGE and cites the graph paths behind each claim, saying "
                "how grounded the answer is. Not medical advice.")


def build_mcp(kg: "KnowledgeGraph", asks: "AskService | None" = None, *, request_timeout: float = 30.0,
              sparql_timeout: float = 10.0, ask_timeout: float = 600.0, max_k: int = 200, max_hops: int = 6,
              max_paths: int = 500, sparql_services: tuple[str, ...] = ()) -> "MCPServer":
    """An ``MCPServer`` with the tools above over ``kg`` (opened read-only by the caller). Without ``asks`` the
    ``ask`` tool is not offered."""
    import mirage_reason
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    server = MCPServer("mirage-kg", version=mirage_reason.__version__, instructions=INSTRUCTIONS,
                       log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    limiter = anyio.CapacityLimiter(8)

    async def run(fn: Callable[[], T], limit: float = request_timeout) -> T:
        """``fn()`` on a worker thread, bounded in time; a MirageError becomes the tool error the client reads."""
        try:
            with anyio.fail_after(limit):
                return await anyio.to_thread.run_sync(fn, limiter=limiter, abandon_on_cancel=True)
        except TimeoutError:
            raise ToolError(f"the request took longer than {limit:g} s; it goes on in the background, so a retry "
                            "may find its caches ready (the first link loads the embedding model); or narrow it "
                            "(smaller k, fewer hops or paths)") from None
        except MirageError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from None

    def resolve(text: str, what: str) -> Any:
        if not text.strip():
            raise InputError(f"{what} is empty; give a CURIE such as HP:0001166 or a name (find one with `link`)")
        return resolve_name(kg, text)

    _add_graph_tools(server, kg, run, resolve, read_only, max_k=max_k, max_hops=max_hops, max_paths=max_paths)
    _add_sparql(server, kg, run, read_only, sparql_timeout, sparql_services)
    if importlib.util.find_spec("mirage_kg.retrieval.differential") is not None:
        _add_differential(server, kg, run, resolve, read_only)
    if asks is not None:
        _add_ask(server, asks, ask_timeout, ToolAnnotations(read_only_hint=True, open_world_hint=False), ToolError)
    return server


def _add_graph_tools(server: "MCPServer", kg: "KnowledgeGraph", run: Callable[..., Awaitable[Any]],
                     resolve: Callable[[str, str], Any], annotations: Any, *, max_k: int, max_hops: int,
                     max_paths: int) -> None:
    """The link, anchor and bridge tools (as ``link``, ``query anchor`` and ``query bridge``), bounded by the
    server's limits."""
    @server.tool(annotations=annotations)
    async def link(text: Annotated[str, Field(min_length=1, max_length=2000, description="free text")],
                   top: Annotated[int, Field(ge=1, le=20, description="candidates per mention")] = 5,
                   ) -> dict[str, Any]:
        """Find mentions of knowledge-graph entities in a text; each mention's candidates ranked, with CURIEs."""
        return await run(lambda: link_json(kg.link(text, top=top)))

    @server.tool(annotations=annotations)
    async def anchor(entity: Annotated[str, Field(min_length=1, max_length=2000,
                                                  description="CURIE (e.g. HP:0001166), IRI or exact name")],
                     k: Annotated[int, Field(ge=1, le=max_k, description="neighbours per relation and direction")] = 10,
                     relations: Annotated[list[str] | None, Field(description="only these relations (CURIEs)")] = None,
                     direction: Literal["both", "out", "in"] = "both") -> dict[str, Any]:
        """An entity's typed neighbourhood: at most k neighbours per relation and direction."""
        def work() -> dict[str, Any]:
            resolved = resolve(entity, "entity")
            steps = kg.anchor(resolved.entity, k=k, relations=relations or None, direction=direction)
            return {**anchor_json(resolved.entity, steps), "resolved": resolved.to_json()}

        return await run(work)

    @server.tool(annotations=annotations)
    async def bridge(source: Annotated[str, Field(min_length=1, max_length=2000, description="CURIE, IRI or name")],
                     target: Annotated[str, Field(min_length=1, max_length=2000, description="CURIE, IRI or name")],
                     max_hops: Annotated[int, Field(ge=1, le=max_hops, description="longest path, in edges")] = 3,
                     max_paths: Annotated[int, Field(ge=1, le=max_paths, description="most paths returned")] = 20,
                     ) -> dict[str, Any]:
        """Every typed relation path of at most max_hops edges between two entities, shortest first."""
        def work() -> dict[str, Any]:
            a, b = resolve(source, "source"), resolve(target, "target")
            paths = kg.bridge(a.entity, b.entity, max_hops=max_hops, max_paths=max_paths)
            hubs = [(kg.entity(iri), edges) for iri, edges in paths.capped]
            return {**bridge_json(a.entity, b.entity, paths, hubs), "resolved": [a.to_json(), b.to_json()]}

        return await run(work)


def _add_sparql(server: "MCPServer", kg: "KnowledgeGraph", run: Callable[..., Awaitable[Any]], annotations: Any,
                sparql_timeout: float, sparql_services: tuple[str, ...]) -> None:
    """The sparql tool, guarded as ``query sparql`` is."""
    @server.tool(annotations=annotations)
    async def sparql(query: Annotated[str, Field(min_length=1, max_length=60000,
                                                 description="a SPARQL 1.1 SELECT, ASK, CONSTRUCT or DESCRIBE")],
                     ) -> dict[str, Any]:
        """Run a read-only SPARQL query on the knowledge graph (updates are refused); SPARQL 1.1 JSON results
        (CONSTRUCT and DESCRIBE: {"triples": [[s, p, o], ...]})."""
        def work() -> dict[str, Any]:
            check_read_only(query, sparql_services)  # the guard of `query sparql`: updates and SERVICE refused
            return sparql_json(kg.store.query(query, timeout=sparql_timeout))

        return await run(work, sparql_timeout + 1)


def _add_ask(server: "MCPServer", asks: "AskService", ask_timeout: float, annotations: Any,
             tool_error: type[Exception]) -> None:
    """The ask tool: MIRAGE's answer through the server's ask queue, under the ask time limit."""
    from mirage_reason.service.openai_chat import render_text

    @server.tool(annotations=annotations)
    async def ask(question: Annotated[str, Field(min_length=1, max_length=4000, description="the question")],
                  seed: Annotated[int | None, Field(description="sampling seed, for a reproducible run")] = None,
                  ) -> dict[str, Any]:
        """Answer a medical question with MIRAGE: sub-questions, reasoning chains that search the graph, and
        one answer whose claims cite graph paths. `text` is the answer with how grounded it is and its cited
        paths; `record` is the whole answer (claims, support, flags, chains, timings). Not medical advice."""
        try:
            future, _ = asks.submit(question, {"seed": seed} if seed is not None else {})
            answer = await asyncio.wait_for(asyncio.wrap_future(future), ask_timeout)
        except TimeoutError:
            future.cancel()
            raise tool_error(f"the answer took longer than {ask_timeout:g} s") from None
        except MirageError as exc:
            raise tool_error(f"{type(exc).__name__}: {exc}") from None
        record = answer.to_json()
        return {"text": render_text(record), "record": record}


def _add_differential(server: "MCPServer", kg: "KnowledgeGraph", run: Callable[..., Awaitable[Any]],
                      resolve: Callable[[str, str], Any], annotations: Any) -> None:
    """The differential tool, over ``mirage_kg.retrieval.differential`` (what ``query differential`` runs)."""
    from mirage_kg import differential_diagnosis as rank

    @server.tool(annotations=annotations)
    async def differential(findings: Annotated[str | list[str], Field(description=
                                               "a text naming the findings (linked to the graph), or a list of "
                                               "findings as CURIEs or exact names")],
                           top: Annotated[int, Field(ge=1, le=50, description="diagnoses returned")] = 10,
                           ) -> dict[str, Any]:
        """The conditions in the graph that best explain a set of findings (symptoms, signs), ranked, each with
        the findings it explains, those it leaves out, and the paths behind it."""
        def work() -> dict[str, Any]:
            if isinstance(findings, str):
                if not findings.strip():
                    raise InputError("findings is empty: name the symptoms and signs")
                return rank(kg, findings, top=top).to_json()
            if not findings:
                raise InputError("findings is empty: name the symptoms and signs")
            return rank(kg, [resolve(f, "finding").entity for f in findings], top=top).to_json()

        return await run(work)


def mcp_http_app(kg: "KnowledgeGraph", asks: "AskService | None", settings: "ServiceSettings") -> Any:
    """The MCP server's streamable-HTTP app for ``serve`` (its route is served at ``/mcp``), or None when ``mcp``
    is not installed. Its DNS-rebinding check (Host and Origin must be loopback) is on when serving on loopback."""
    try:
        from mcp.server.transport_security import TransportSecuritySettings
    except ImportError:  # the optional [mcp] extra
        return None

    server = build_mcp(kg, asks, request_timeout=settings.request_timeout, sparql_timeout=settings.sparql_timeout,
                       ask_timeout=settings.ask_timeout, max_k=settings.max_k, max_hops=settings.max_hops,
                       max_paths=settings.max_paths, sparql_services=settings.sparql_services)
    loopback = settings.host in ("127.0.0.1", "localhost", "::1")
    security = None if loopback else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return server.streamable_http_app(streamable_http_path="/mcp", host=settings.host, transport_security=security)
