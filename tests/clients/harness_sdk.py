"""A fixture's provider response as the official SDK hands it to a harness.

A JSON response is validated into the SDK's own response type (``ChatCompletion``,
``Response``, ``Message``); a recorded stream is served by a ``ProviderServer`` and read with the
SDK's stream helper, whose accumulator builds the final object
(``get_final_completion()``, ``get_final_response()``, ``get_final_message()``).
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from tests.provider.recording import ProviderServer

Json = dict[str, Any]


def openai_client(server: ProviderServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="test", base_url=f"{server.base_url}/v1", max_retries=0)


def anthropic_client(server: ProviderServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0)


def sdk_response(case: Json, server: ProviderServer) -> Any:
    wire = case["wire_format"]
    if "response" in case:
        if wire == "openai_chat":
            return ChatCompletion.model_validate(case["response"])
        if wire == "openai_responses":
            return Response.model_validate(case["response"])
        return Message.model_validate(case["response"])
    server.answer({"stream": case["stream"]})
    if wire == "openai_chat":
        with openai_client(server).chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "go"}]
        ) as chat:
            return chat.get_final_completion()
    if wire == "openai_responses":
        with openai_client(server).responses.stream(model="m", input="go") as responses:
            return responses.get_final_response()
    with anthropic_client(server).messages.stream(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "go"}]
    ) as messages:
        return messages.get_final_message()
