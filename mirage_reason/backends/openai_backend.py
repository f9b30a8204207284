"""Any OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, ``transformers serve``) as a backend.

Every submitted request goes out at once over one ``httpx.AsyncClient`` (on its own event-loop thread), with at
most ``concurrency`` in flight, so a server that batches (vLLM, SGLang) advances every live chain together and its
prefix cache makes a resumed chain cheap. Transient failures (connection refused, timeouts, 429, 5xx) are retried
with backoff; everything ends up as a ``BackendError`` naming the endpoint and saying whether a retry may help.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

from mirage_kg import MissingExtraError

from mirage_reason.backends.base import (
    BackendBase,
    Completion,
    CompletionRequest,
    GenerationParams,
    OutputConstraint,
    ThinkMode,
    apply_stop,
    check_honoured,
    chatml,
    parse_chatml,
    refuse_constraint,
    strip_think,
    whitespace_tokens,
)
from mirage_reason.errors import BackendError, MissingModelError

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingExtraError("httpx", "llm") from exc

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["OpenAIBackend"]

_MAX_RETRY_AFTER_S = 30.0
T = TypeVar("T")


class OpenAIBackend(BackendBase):
    """Client for ``{base_url}/completions`` (``mode="completions"``) or ``{base_url}/chat/completions``.

    ``base_url`` is the OpenAI-style root, e.g. ``http://127.0.0.1:8000/v1`` (a bare ``http://host:port`` gets
    ``/v1``). ``model=None`` uses the first model the server lists. ``concurrency`` bounds the requests in flight
    (``mirage-kg ask --max-in-flight``); ``transport`` is an ``httpx.AsyncBaseTransport`` (tests). ``api_key`` defaults to ``$OPENAI_API_KEY``.
    ``vllm_params`` sends vLLM's ``top_k`` and ``repetition_penalty``; turn it off for servers that reject them.

    Token counts come from the server's ``usage``; a server that sends none gets a whitespace estimate instead.
    Which stop string fired is known when the server says so (vLLM's ``stop_reason``, SGLang's ``matched_stop``)
    or echoes the stop string in the text; a server that says neither (llama.cpp, Ollama) gets
    ``Completion.stop_unknown=True`` on every "stop" finish, and the chain runner then reads a search block left
    open at the end of the text as closed by its stop string.

    ``structured`` says how output constraints reach the server: ``"response_format"`` (the OpenAI field, a JSON
    schema; choices go as a string enum and come back unwrapped: vLLM, SGLang, llama.cpp's server), ``"llama.cpp"``
    (llama-server's own ``json_schema`` and ``grammar`` fields, on either API), ``"grammar"`` (a GBNF ``grammar``
    only: llama-cpp-python's server; a JSON schema is turned into GBNF by llama.cpp's own converter, which needs
    llama-cpp-python here too) or ``"none"`` (a server with none: a constrained request then fails, it is never
    sent unconstrained). A server that ignores the field it
    was sent (llama-cpp-python's server takes neither on its completions API) is caught: a finished completion outside
    its constraint fails with a :class:`BackendError` saying so, never passes as constrained.

    In chat mode each prompt is read back as ChatML (what :meth:`format_chat` writes in that mode); a prompt that
    ends inside an assistant turn is sent with vLLM's ``continue_final_message`` so a chain can be resumed.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        mode: Literal["completions", "chat"] = "completions",
        timeout: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 8,
        backoff: float = 0.5,
        tokenizer: str | None = None,
        think: ThinkMode = "keep",
        vllm_params: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        structured: Literal["response_format", "llama.cpp", "grammar", "none"] = "response_format",
    ) -> None:
        if mode not in ("completions", "chat"):
            raise ValueError(f"mode must be 'completions' or 'chat', not {mode!r}")
        if structured not in ("response_format", "llama.cpp", "grammar", "none"):
            raise ValueError(f"structured must be 'response_format', 'llama.cpp', 'grammar' or 'none', "
                             f"not {structured!r}")
        self.structured = structured
        self.constraints = frozenset() if structured == "none" else frozenset({"json_schema", "choice"})
        self.base_url = _normalise_base_url(base_url)
        self.mode = mode
        self.max_retries = max_retries
        self.concurrency = max(1, concurrency)
        self.backoff = backoff
        self.timeout = timeout
        self.think: ThinkMode = think
        self.vllm_params = vllm_params
        self.extra_body = dict(extra_body or {})
        self._model = model
        self.name = f"openai:{model}" if model else f"openai:{self.base_url}"
        self._tokenizer_id = tokenizer
        self._tokenizer: PreTrainedTokenizerBase | None = None
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mirage-openai", daemon=True)
        self._thread.start()

        async def make() -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
            client = httpx.AsyncClient(timeout=timeout, headers=headers, limits=limits, transport=transport)
            return client, asyncio.Semaphore(self.concurrency)

        self._client, self._slots = self._call(make())
        self._closed = False

    # -- the Backend contract ------------------------------------------------------------------------------------

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        if self._closed:
            raise BackendError(f"the client for {self.base_url} is closed", hint="build a new OpenAIBackend")
        if request.constraint is not None and request.constraint.kind not in self.constraints:
            failed: Future[Completion] = Future()
            failed.set_exception(refuse_constraint(self.name, request.constraint, "built with structured='none'"))
            return failed
        model = self.model
        return asyncio.run_coroutine_threadsafe(
            self._complete(request.prompt, request.stop, request.params, model, request.constraint), self._loop)

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        if self.mode == "completions" and self._tokenizer_id is not None:
            text = self._local_tokenizer().apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
            )
            return str(text)
        return chatml(messages, add_generation_prompt=add_generation_prompt)

    # -- public helpers ------------------------------------------------------------------------------------------

    @property
    def model(self) -> str:
        """The model name sent with each request; asks the server's ``/models`` when none was given."""
        if self._model is None:
            data = self._call(self._request("GET", "/models"))
            try:
                self._model = str(data["data"][0]["id"])
            except (KeyError, IndexError, TypeError) as exc:
                raise BackendError(
                    f"{self.base_url}/models lists no model", hint="pass model= explicitly", endpoint=self.base_url
                ) from exc
        return self._model

    def list_models(self) -> list[str]:
        data = self._call(self._request("GET", "/models"))
        return [str(m["id"]) for m in data.get("data", [])]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._call(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    # -- internals -----------------------------------------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and wait for it (from any thread but the loop's own)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _local_tokenizer(self) -> PreTrainedTokenizerBase:
        if self._tokenizer is None:
            try:
                from transformers import AutoTokenizer
            except ImportError as exc:
                raise MissingExtraError("transformers", "llm") from exc
            try:
                self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer_id)
            except OSError as exc:
                raise MissingModelError(
                    str(self._tokenizer_id),
                    "its tokenizer (for the chat template) is not available offline; pass a local directory as "
                    "tokenizer=, or leave it out to use ChatML",
                ) from exc
        return self._tokenizer

    def _payload(self, prompt: str, stop: tuple[str, ...], params: GenerationParams, model: str,
                 constraint: OutputConstraint | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": 1,
        }
        if self.mode == "completions":
            body["prompt"] = prompt
        else:
            messages, continue_final = parse_chatml(prompt)
            body["messages"] = messages
            if continue_final:
                body["add_generation_prompt"] = False
                body["continue_final_message"] = True
        if stop:
            body["stop"] = list(stop)
        if params.seed is not None:
            body["seed"] = params.seed
        if self.vllm_params:
            body["top_k"] = max(0, params.top_k)  # 0 = off for llama.cpp and current vLLM (old vLLM wanted -1)
            body["repetition_penalty"] = params.repetition_penalty
        if constraint is not None:
            if self.structured == "grammar":
                body["grammar"] = constraint.gbnf() if constraint.choices else _schema_gbnf(constraint)
            elif self.structured == "llama.cpp":
                if constraint.choices:
                    body["grammar"] = constraint.gbnf()
                else:
                    body["json_schema"] = constraint.json_schema
            else:
                body["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "output", "schema": constraint.schema(), "strict": True}}
        body.update(self.extra_body)
        return body

    async def _complete(self, prompt: str, stop: tuple[str, ...], params: GenerationParams, model: str,
                        constraint: OutputConstraint | None = None) -> Completion:
        path = "/completions" if self.mode == "completions" else "/chat/completions"
        async with self._slots:
            data = await self._request("POST", path, self._payload(prompt, stop, params, model, constraint))
        try:
            choice = data["choices"][0]
            if self.mode == "completions":
                raw = str(choice["text"])
            else:
                message = choice["message"]
                raw = str(message.get("content") or "")
                reasoning = message.get("reasoning_content") or message.get("reasoning")
                if reasoning:  # servers with a reasoning parser split QwQ's thoughts off; put them back
                    raw = f"<think>\n{reasoning}\n</think>\n\n{raw}"
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"{self.base_url}{path} sent a response without choices",
                hint="check that the server speaks the OpenAI API",
                endpoint=f"{self.base_url}{path}",
            ) from exc
        text, fired = apply_stop(raw, stop)  # some servers include the stop string in the text
        says = "stop_reason" in choice or "matched_stop" in choice
        if fired is None:
            reported = choice.get("stop_reason", choice.get("matched_stop"))
            fired = reported if isinstance(reported, str) and reported in stop else None
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        usage = data.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        if self.think == "strip":
            text = strip_think(text)
        if constraint is not None:
            if self.structured == "response_format":
                text = constraint.unwrap(text)  # a choice sent as a string enum comes back as a JSON string
            if fired is None and (says or not stop):  # a stop string may have cut it: then it cannot be checked
                check_honoured(self.name, constraint, text, finish, f"{self.base_url}{path}")
        return Completion(
            text=text,
            prompt_tokens=int(prompt_tokens) if prompt_tokens is not None else whitespace_tokens(prompt),
            completion_tokens=int(completion_tokens) if completion_tokens is not None else whitespace_tokens(raw),
            finish_reason=finish,
            stop=fired,
            stop_unknown=bool(stop) and finish == "stop" and fired is None and not says,
        )

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                       url: str | None = None) -> Any:
        """The JSON body of ``{base_url}{path}`` (or of ``url``), with retries; a JSON object, or a list where the
        server answers one (llama.cpp's own API with several completions)."""
        url = url or f"{self.base_url}{path}"
        error: BackendError | None = None
        retry_after: float | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._delay(attempt, retry_after))
                retry_after = None
            try:
                response = await self._client.request(method, url, json=body)
            except httpx.TimeoutException as exc:
                error = BackendError(
                    f"{method} {url} timed out after {self.timeout} s",
                    retryable=True,
                    hint="raise timeout= or lower max_new_tokens; check that the server is not overloaded",
                    endpoint=url,
                )
                error.__cause__ = exc
                continue
            except httpx.TransportError as exc:
                error = BackendError(
                    f"cannot reach {url}: {exc}",
                    retryable=True,
                    hint="start an OpenAI-compatible server there (`python -m llama_cpp.server --model FILE.gguf "
                    "--port 8000` or `vllm serve MODEL`) or fix base_url",
                    endpoint=url,
                )
                error.__cause__ = exc
                continue
            if response.status_code < 400:
                try:
                    data = response.json()
                    return data if isinstance(data, list) else dict(data)
                except (ValueError, TypeError) as exc:
                    raise BackendError(
                        f"{url} answered HTTP {response.status_code} with a body that is not JSON",
                        hint="check that base_url points at an OpenAI-compatible API (it usually ends in /v1)",
                        endpoint=url,
                        status=response.status_code,
                    ) from exc
            error = _http_error(url, response)
            if not error.retryable:
                raise error
            retry_after = _retry_after(response)
        assert error is not None
        if not self.max_retries:
            raise error
        raise BackendError(
            f"{error.message} (gave up after {self.max_retries + 1} attempts)",
            retryable=True,
            hint=error.hint,
            endpoint=url,
            status=error.status,
        ) from (error.__cause__ or error)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = self.backoff * 2 ** (attempt - 1) * (1 + 0.1 * random.random())
        if retry_after is not None:
            delay = max(delay, min(retry_after, _MAX_RETRY_AFTER_S))
        return delay


def _schema_gbnf(constraint: OutputConstraint) -> str:
    """A JSON schema as GBNF, by llama.cpp's own converter (llama-cpp-python's copy of it)."""
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError as exc:
        raise BackendError("structured='grammar' turns JSON schemas into GBNF with llama-cpp-python's converter, "
                           "which is not installed", hint="pip install 'mirage-kg[llamacpp]'") from exc
    return str(json_schema_to_gbnf(json.dumps(constraint.json_schema)))


def _normalise_base_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    if urlsplit(url).path in ("", "/"):
        url += "/v1"
    return url


def _http_error(url: str, response: httpx.Response) -> BackendError:
    status = response.status_code
    try:
        message: Any = response.json()
    except ValueError:
        message = response.text[:500]
    if isinstance(message, dict):  # OpenAI: {"error": {"message": ...}}; others: {"error": "..."} or {"detail": ...}
        message = message.get("error", message.get("detail", message))
    if isinstance(message, dict):
        message = message.get("message", message)
    retryable = status == 429 or status >= 500
    if status == 429:
        hint = "the server is rate limiting; lower concurrency= or retry later"
    elif status >= 500:
        hint = "the server failed; check its log"
    elif status in (401, 403):
        hint = "check api_key= or $OPENAI_API_KEY"
    elif status == 404:
        hint = (
            "check base_url (it usually ends in /v1) and the model name; "
            "if the server has no completions API use mode='chat'"
        )
    else:
        hint = "the server rejected the request; if it does not accept top_k/repetition_penalty pass vllm_params=False"
    return BackendError(
        f"{url} answered HTTP {status}: {message}", retryable=retryable, hint=hint, endpoint=url, status=status
    )


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (the HTTP-date form is rare from LLM servers and is ignored)."""
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None
