"""Point the clients other tools use at a running ``mirage-kg serve`` and print what each gets: the official
``openai`` SDK (a non-streamed and a streamed chat completion, with the citations and flags of the ``mirage``
field), the official ``mcp`` SDK (every tool listed and called), SPARQLWrapper and rdflib's ``SPARQLStore`` (a
SELECT, an ASK, a CONSTRUCT, and an UPDATE refused).

    mirage-kg serve --store kg &                    # or the demo KG; --token T then MIRAGE_KG_TOKEN=T here
    python scripts/try_clients.py http://127.0.0.1:8000 ["question"]

Needs ``pip install 'mirage-kg[mcp,test]'`` (the mcp, openai and SPARQLWrapper clients)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import urllib.error

QUESTION = "I have palpitations, feel dizzy and short of breath. What could it be and what should I take?"
ENTITY = "https://w3id.org/mirage-kg/entity/Asthma"


def _short(value: object, width: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width] + " ..."


def openai_chat(url: str, token: str, question: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key=token or "none", max_retries=0, timeout=900)
    print("== openai: models:", [m.id for m in client.models.list()])
    started = time.perf_counter()
    reply = client.chat.completions.create(model="mirage", messages=[{"role": "user", "content": question}])
    record = reply.model_extra["mirage"]
    print(f"== openai: chat.completions.create ({time.perf_counter() - started:.1f} s)")
    print(reply.choices[0].message.content)
    print("-- mirage.support:", record.get("support"))
    print("-- mirage.flags:", record.get("flags"))
    print("-- mirage.claims:", [(c["text"], [p["text"] for p in c["citations"]]) for c in record["claims"]])
    print(f"-- usage: {reply.usage}")
    started = time.perf_counter()
    chunks = list(client.chat.completions.create(model="mirage", stream=True,
                                                 messages=[{"role": "user", "content": question}]))
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    last = chunks[-1]
    print(f"== openai: stream=True ({time.perf_counter() - started:.1f} s, {len(chunks)} chunks)")
    print("-- reasoning_content:\n" + reasoning.rstrip())
    print("-- content:\n" + text)
    print("-- last chunk: finish_reason", last.choices[0].finish_reason, "; mirage.support",
          last.model_extra["mirage"].get("support"), "; flags", last.model_extra["mirage"].get("flags"))


async def _mcp(url: str, token: str, question: str) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(900.0)) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            tools = (await client.list_tools()).tools
            print("== mcp: tools:", [(t.name, sorted(t.input_schema["properties"])) for t in tools])
            calls = {"link": {"text": "my chest hurts and I feel dizzy"}, "anchor": {"entity": "KG:Asthma", "k": 2},
                     "bridge": {"source": "KG:Asthma", "target": "KG:Wheezing", "max_hops": 2, "max_paths": 2},
                     "sparql": {"query": f"SELECT ?p ?o WHERE {{ <{ENTITY}> ?p ?o }} LIMIT 2"},
                     "differential": {"findings": "palpitations, dizziness, shortness of breath", "top": 3},
                     "ask": {"question": question, "seed": 0}}
            for tool in tools:
                started = time.perf_counter()
                result = await client.call_tool(tool.name, calls[tool.name])
                shown = result.structured_content.get("text") if tool.name == "ask" else result.structured_content
                print(f"-- {tool.name} ({time.perf_counter() - started:.1f} s, error={result.is_error}):",
                      shown if tool.name == "ask" else _short(shown))
            refused = await client.call_tool("sparql", {"query": "DELETE WHERE { ?s ?p ?o }"})
            print("-- sparql DELETE: error =", refused.is_error, "|", refused.content[0].text)


def sparql_clients(url: str, token: str) -> None:
    from rdflib import Graph
    from rdflib.plugins.stores.sparqlstore import SPARQLStore, SPARQLUpdateStore
    from SPARQLWrapper import JSON, POST, TURTLE, SPARQLWrapper

    def wrapper(query: str, fmt: str, method: str = "GET") -> SPARQLWrapper:
        sparql = SPARQLWrapper(f"{url}/sparql")
        if token:
            sparql.addCustomHttpHeader("Authorization", f"Bearer {token}")
        sparql.setQuery(query)
        sparql.setReturnFormat(fmt)
        sparql.setMethod(method)
        return sparql

    select = f"SELECT ?p ?o WHERE {{ <{ENTITY}> ?p ?o }} ORDER BY ?p LIMIT 3"
    print("== SPARQLWrapper SELECT:", [(b["p"]["value"], b["o"]["value"])
                                       for b in wrapper(select, JSON).queryAndConvert()["results"]["bindings"]])
    print("== SPARQLWrapper ASK:", wrapper("ASK { ?s ?p ?o }", JSON).queryAndConvert())
    turtle = wrapper(f"CONSTRUCT {{ <{ENTITY}> ?p ?o }} WHERE {{ <{ENTITY}> ?p ?o }}", TURTLE).queryAndConvert()
    print(f"== SPARQLWrapper CONSTRUCT: {len(Graph().parse(data=turtle, format='turtle'))} triples of Turtle")
    try:
        wrapper("INSERT DATA { <urn:a> <urn:b> <urn:c> }", JSON, POST).query()
        print("== SPARQLWrapper UPDATE: NOT refused")
    except urllib.error.HTTPError as exc:
        print("== SPARQLWrapper UPDATE: refused,", exc.code, exc.read().decode())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    graph = Graph(SPARQLStore(f"{url}/sparql", headers=headers))
    print("== SPARQLStore SELECT:", [(str(p), str(o)) for p, o in graph.query(select)])
    print("== SPARQLStore ASK:", graph.query("ASK { ?s ?p ?o }").askAnswer)
    built = graph.query(f"CONSTRUCT {{ <{ENTITY}> ?p ?o }} WHERE {{ <{ENTITY}> ?p ?o }}").graph
    print(f"== SPARQLStore CONSTRUCT: {len(built)} triples")
    try:
        SPARQLUpdateStore(f"{url}/sparql", f"{url}/sparql", headers=headers).update("CLEAR ALL")
        print("== SPARQLUpdateStore UPDATE: NOT refused")
    except urllib.error.HTTPError as exc:
        print("== SPARQLUpdateStore UPDATE: refused,", exc.code)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    url = sys.argv[1].rstrip("/")
    question = sys.argv[2] if len(sys.argv) > 2 else QUESTION
    token = os.environ.get("MIRAGE_KG_TOKEN", "")
    sparql_clients(url, token)
    asyncio.run(_mcp(url, token, question))
    openai_chat(url, token, question)


if __name__ == "__main__":
    main()
