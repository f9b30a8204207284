"""Virtuoso's own limits, met with advice that works there: ``query sparql`` pages a SELECT past the result-size
cap itself (its own LIMIT/OFFSET too), and where Virtuoso cannot page (ORDER BY past MaxSortedTopRows: SR353) or
walk (``+`` paths past its transitive memory) the error says what does work there, at once (a deterministic
error is not retried)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.errors import QueryError
from mirage_kg.store import SparqlStore

from tests.kg.test_sparql_client import serve  # noqa: F401  (the scripted server fixture)

ROWS = 12_500  # past Virtuoso's default ResultSetMaxRows of 10,000


def _data(tmp: Path) -> Path:
    path = tmp / "wide.nt"
    path.write_text("".join(f"<urn:w:{i}> <urn:w:p> <urn:w:{i // 2}> .\n" for i in range(ROWS)), encoding="utf-8")
    return path


def _rows(args: list[str]) -> list[Any]:
    result = CliRunner().invoke(main, ["query", "sparql", *args, "--json", "--timeout", "120"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["results"]["bindings"]


@pytest.mark.slow
def test_query_sparql_pages_past_virtuosos_result_cap(virtuoso_server: Any, tmp_path: Path) -> None:
    """The same rows as the embedded store where the endpoint's cap (10,000) used to end it with advice to add
    LIMIT/OFFSET."""
    virtuoso_server.clear()
    data = _data(tmp_path)
    embedded = ["--store", str(tmp_path / "store")]
    live = ["--endpoint", virtuoso_server.query_url]
    for where in (embedded, live):
        assert CliRunner().invoke(main, ["load", str(data), "--graph", "wide", "--no-index", *where]).exit_code == 0
    every = "SELECT ?s ?o WHERE { ?s <urn:w:p> ?o }"
    for query, count in ((every, ROWS), (every + " LIMIT 11000", 11_000), (every + " LIMIT 100 OFFSET 12450", 50),
                         (every + " OFFSET 10", ROWS - 10)):
        got, expected = _rows([query, *live]), _rows([query, *embedded])
        assert len(got) == len(expected) == count, query
        if count == ROWS:
            assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, expected))
    for where in (embedded, live):  # the bounded walk the advice names answers on Virtuoso as elsewhere
        done = CliRunner().invoke(main, ["query", "sparql", "ASK { { <urn:w:8> <urn:w:p> <urn:w:1> } UNION "
                                         "{ <urn:w:8> <urn:w:p>/<urn:w:p> <urn:w:1> } UNION "
                                         "{ <urn:w:8> <urn:w:p>/<urn:w:p>/<urn:w:p> <urn:w:1> } }", *where])
        assert done.output.strip() == "true", done.output
    sorted_past_cap = CliRunner().invoke(main, ["query", "sparql", every + " ORDER BY ?s", *live])
    assert sorted_past_cap.exit_code == 1
    assert "by its sort key" in sorted_past_cap.output and "Traceback" not in sorted_past_cap.output


VIRTUOSO_ERRORS = {
    "SR353": "Virtuoso 22023 Error SR353: Sorted TOP clause specifies more then 40100 rows to sort. Only 10000 are "
             "allowed. Either decrease the offset and/or row count or use a scrollable cursor",
    "transitive": "Virtuoso 42000 Error TN...: Exceeded 1000000000 bytes in transitive temp memory.  use t_distinct, "
                  "t_max or more T_MAX_memory options to limit the search or increase the pool",
}


@pytest.mark.parametrize("code, advice", [("SR353", "by its sort key"), ("transitive", "UNION { ?a p/p ?b }")])
def test_virtuoso_limits_are_one_error_with_advice_that_works_there(serve: Any, code: str, advice: str) -> None:  # noqa: F811
    server = serve(lambda h, f: h.send(500, VIRTUOSO_ERRORS[code].encode(), "text/plain"))
    with pytest.raises(QueryError) as info:
        SparqlStore(server.url, backoff=0.01).select("SELECT ?s WHERE { ?s <urn:p>+ ?o } ORDER BY ?s OFFSET 40000")
    text = str(info.value)
    assert advice in text and "\n" not in text
    asked = [f for _, f in server.requests if "query" in f and "urn:p" in f["query"][0]]
    assert len(asked) == 1  # a limit of the engine, not a passing failure: not retried
