#!/usr/bin/python3
"""Renders every chat template in this folder over a corpus of conversations with Debian's
python3-jinja2, configured exactly as Hugging Face transformers renders chat templates
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, HF's tojson,
raise_exception and strftime_now; tools and documents passed as None when absent; special tokens
only when set), into goldens.json. tests/engine/jinja/golden_test.cc demands Tandem's
interpreter reproduce every rendering byte for byte, and fail wherever Jinja2 fails.

strftime_now uses a fixed clock (2026-03-14 15:09:26) so the goldens are reproducible.
Usage: /usr/bin/python3 render_goldens.py   (needs the python3-jinja2 package)"""
import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
FIXED_NOW = datetime.datetime(2026, 3, 14, 15, 9, 26)

# Template file -> the special tokens its checkpoint's tokenizer_config.json sets.
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "Qwen-Qwen3.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "meta-llama-Llama-3.2-3B-Instruct.jinja": {"bos_token": "<|begin_of_text|>",
                                               "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.3-70B-Instruct.jinja": {"bos_token": "<|begin_of_text|>",
                                                "eos_token": "<|eot_id|>"},
    "meta-llama-Meta-Llama-3-8B-Instruct.jinja": {"bos_token": "<|begin_of_text|>",
                                                  "eos_token": "<|end_of_text|>"},
    "tandem-tiny-english.jinja": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Búsqueda web — returns snippets 🔎",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "safe": {"type": "boolean"},
                "weights": {"type": "array", "items": {"type": "number"}},
            },
            "required": ["query"],
        },
    },
}


def call(name, arguments, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversations():
    """(label, messages, extra variables) triples."""
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    out = [
        ("single user", [{"role": "user", "content": "Hello!"}], {}),
        ("system + user", [sys_msg, {"role": "user", "content": "What is 2+2?"}], {}),
        ("whitespace around content",
         [{"role": "system", "content": "  Be terse.  \n"},
          {"role": "user", "content": "\n\tHi there \n"}], {}),
        ("multi-turn",
         [sys_msg, {"role": "user", "content": "Name a fruit."},
          {"role": "assistant", "content": "Apple."},
          {"role": "user", "content": "Another one?"},
          {"role": "assistant", "content": "Banana."},
          {"role": "user", "content": "Thanks"}], {}),
        ("ends with assistant",
         [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi!"}], {}),
        ("unicode",
         [{"role": "system", "content": "Réponds en français 🇫🇷."},
          {"role": "user", "content": "日本語で答えて 😀 — «ok»? عربى हिन्दी e\u0301"},
          {"role": "assistant", "content": "はい、わかりました。"},
          {"role": "user", "content": "Zero\u200bwidth, tab\tand \"quotes\" 'single' \\back"}], {}),
        ("empty content", [{"role": "user", "content": ""}], {}),
        ("special tokens in text",
         [{"role": "user", "content": "literal <|im_end|> and <|eot_id|> and {{ braces }}"}], {}),
        ("second system message",
         [sys_msg, {"role": "user", "content": "a"}, {"role": "system", "content": "Now be formal."},
          {"role": "user", "content": "b"}], {}),
        ("thinking in history",
         [{"role": "user", "content": "What is 3*4?"},
          {"role": "assistant", "content": "<think>\n3*4 is 12.\n</think>\n\n12"},
          {"role": "user", "content": "And 5*6?"}], {}),
        ("thinking last assistant",
         [{"role": "user", "content": "Think then answer: 1+1"},
          {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n2"}], {}),
        ("reasoning_content field",
         [{"role": "user", "content": "Why is the sky blue?"},
          {"role": "assistant", "content": "Rayleigh scattering.",
           "reasoning_content": "Short wavelengths scatter more."},
          {"role": "user", "content": "And sunsets?"}], {}),
        ("enable_thinking false", [sys_msg, {"role": "user", "content": "Quick answer: capital of Peru?"}],
         {"enable_thinking": False}),
        ("enable_thinking true", [sys_msg, {"role": "user", "content": "Capital of Chile?"}],
         {"enable_thinking": True}),
        ("thinking off with history",
         [{"role": "user", "content": "hi"},
          {"role": "assistant", "content": "<think>\nx\n</think>\n\nhello"},
          {"role": "user", "content": "bye"}], {"enable_thinking": False}),
        ("tools, no system", [{"role": "user", "content": "Weather in Paris?"}],
         {"tools": [WEATHER_TOOL]}),
        ("tools with system", [sys_msg, {"role": "user", "content": "Search for cats"}],
         {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
        ("assistant tool call (dict arguments)",
         [sys_msg, {"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": None,
           "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"})]},
          {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"}],
         {"tools": [WEATHER_TOOL]}),
        ("assistant tool call (string arguments)",
         [{"role": "user", "content": "Weather in Oslo?"},
          {"role": "assistant", "content": "",
           "tool_calls": [call("get_weather", "{\"city\": \"Oslo\"}")]},
          {"role": "tool", "content": "-3 and snowing"},
          {"role": "assistant", "content": "It is -3 °C and snowing in Oslo."},
          {"role": "user", "content": "Thanks!"}], {"tools": [WEATHER_TOOL]}),
        ("tool call with content and numbers",
         [{"role": "user", "content": "Find pages"},
          {"role": "assistant", "content": "Let me search.",
           "tool_calls": [call("search", {"query": "naïve \"bayes\"\n", "limit": 5, "safe": True,
                                          "weights": [0.5, 1e-07, 2.0, 1e21, -0.0, 123456789012],
                                          "extra": None, "nested": {"a": {}, "b": []}})]},
          {"role": "tool", "content": "[\"r1\", \"r2\"]"}], {"tools": [SEARCH_TOOL]}),
        ("parallel tool calls",
         [{"role": "user", "content": "Weather in Rome and Lima?"},
          {"role": "assistant", "content": None,
           "tool_calls": [call("get_weather", {"city": "Rome"}, "a"),
                          call("get_weather", {"city": "Lima"}, "b")]},
          {"role": "tool", "tool_call_id": "a", "content": "sunny"},
          {"role": "tool", "tool_call_id": "b", "content": "cloudy"}], {"tools": [WEATHER_TOOL]}),
        ("parallel tool calls, empty content, thinking off",
         [sys_msg, {"role": "user", "content": "Weather in Rome and Lima?"},
          {"role": "assistant", "content": "",
           "tool_calls": [call("get_weather", {"city": "Rome"}, "a"),
                          call("get_weather", "{\"city\": \"Lima\"}", "b")]},
          {"role": "tool", "tool_call_id": "a", "content": "sunny"},
          {"role": "tool", "tool_call_id": "b", "content": "cloudy"},
          {"role": "assistant", "content": "Rome is sunny, Lima cloudy."},
          {"role": "user", "content": "And tomorrow?"}],
         {"tools": [WEATHER_TOOL, SEARCH_TOOL], "enable_thinking": False}),
        ("reasoning then tool call",
         [{"role": "user", "content": "Weather in Quito?"},
          {"role": "assistant", "content": "<think>\nI should call the tool.\n</think>\n\n",
           "tool_calls": [call("get_weather", {"city": "Quito"})]},
          {"role": "tool", "content": "18C"}], {"tools": [WEATHER_TOOL]}),
        ("tool result as object",
         [{"role": "user", "content": "Weather?"},
          {"role": "assistant", "tool_calls": [call("get_weather", {"city": "Kyiv"})]},
          {"role": "tool", "content": {"temp": 4, "unit": "C", "ok": True}}],
         {"tools": [WEATHER_TOOL]}),
        ("tool response typed by the user",
         [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
          {"role": "user", "content": "<tool_response>\nfake\n</tool_response>"},
          {"role": "assistant", "content": "<think>\nconsidering\n</think>\n\nok"}], {}),
        ("tools without a user message", [{"role": "system", "content": "Only system."}],
         {"tools": [WEATHER_TOOL]}),
        ("tools_in_user_message false", [{"role": "user", "content": "Weather in Cairo?"}],
         {"tools": [WEATHER_TOOL], "tools_in_user_message": False}),
        ("date_string given", [sys_msg, {"role": "user", "content": "What day is it?"}],
         {"date_string": "01 Jan 2030"}),
        ("builtin tools", [{"role": "user", "content": "Compute 2**10"}],
         {"builtin_tools": ["code_interpreter", "brave_search"]}),
        ("content as parts",
         [{"role": "user", "content": [{"type": "text", "text": "part one"}]}], {}),
        ("ipython role", [{"role": "user", "content": "run it"},
                          {"role": "ipython", "content": "42"}], {}),
        ("long conversation",
         [sys_msg] + [m for i in range(12) for m in (
             {"role": "user", "content": f"Question {i}: {'x' * i}?"},
             {"role": "assistant", "content": f"Answer {i}."})], {}),
    ]
    return out


# Small templates exercising one construct each, rendered with `SNIPPET_VARS`.
SNIPPET_VARS = {
    "s": "  Hello, World  ", "u": "héllo wörld ñ 日本", "n": 7, "f": 2.5, "neg": -3,
    "items": [3, 1, 2], "words": ["b", "A", "c", "a"], "empty": [], "none": None, "t": True,
    "d": {"b": 1, "a": [1, 2], "c": {"x": "y"}},
    "msgs": [{"role": "user", "content": "hi", "n": 2}, {"role": "tool", "content": "r", "n": 1},
             {"role": "assistant", "content": "ok", "n": 3}],
    "multiline": "line1\nline2\n\nline4",
}
SNIPPETS = [
    "{{ 'a' ~ 1 ~ none ~ true }}", "{{ 1 + 2 * 3 - 4 / 2 }}", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}",
    "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 10 / 4 }} {{ 1.5 + 1 }}",
    "{{ (-1) ** 3 }} {{ (-1) ** 4 }} {{ 0 ** 0 }} {{ 1 ** 99999999999 }} {{ -9 // -1 }} {{ -9 % -1 }} {{ range(9223372036854775806, 9223372036854775807, 5)|list }} {{ items[2::9223372036854775807] }}", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }}",
    "{{ n > 5 and n < 10 }} {{ n == 7.0 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }}", "{{ 'b' in 'abc' }} {{ 2 in items }} {{ 'a' in d }} {{ 'z' not in d }}",
    "{{ not t }} {{ t and 'x' }} {{ none or 'fallback' }} {{ empty or 'e' }}", "{{ 'yes' if n > 3 else 'no' }} [{{ 'x' if false }}]",
    "{{ s|trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}", "{{ s|upper }} {{ s|lower }} {{ u|upper }} {{ 'hello world'|title }} {{ 'hELLO'|capitalize }}",
    "{{ s|length }} {{ u|length }} {{ items|length }} {{ d|length }} {{ undefined_var|length }}", "{{ items|first }} {{ items|last }} {{ u|first }} {{ words|join(',') }} {{ items|join }}",
    "{{ items|sort }} {{ words|sort }} {{ words|sort(reverse=true) }} {{ words|sort(case_sensitive=true) }}", "{{ msgs|sort(attribute='n')|map(attribute='role')|join(' ') }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|rejectattr('role', 'eq', 'tool')|map(attribute='content')|list }}",
    "{{ items|select('odd')|list }} {{ items|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }}", "{{ words|unique|list }} {{ items|min }} {{ items|max }} {{ items|sum }} {{ msgs|sum(attribute='n') }}",
    "{{ d|tojson }}", "{{ d|tojson(indent=2) }}", "{{ msgs|tojson(separators=(',', ':')) }}", "{{ d|tojson(sort_keys=true) }}", "{{ u|tojson }} {{ 'a\"b\\\\c\\n\\t\\u0001'|tojson }} {{ none|tojson }} {{ [1.0, 2, 1e-7]|tojson }}",
    "{{ d|items|list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}",
    "{{ d }} {{ msgs[0] }} {{ items }} {{ [none, true, 1.0, 'it\\'s'] }} {{ u }}", "{{ items[0] }} {{ items[-1] }} {{ items[1:] }} {{ items[:-1] }} {{ items[::-1] }} {{ items[::2] }} {{ u[1:4] }} {{ u[::-1] }}",
    "{{ d.a[1] }} {{ d['c']['x'] }} {{ d.c.x }} {{ d.missing }}|{{ d['missing'] }}|{{ items[10] }}|{{ none.x }}", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}",
    "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'banana'.find('n') }} {{ 'banana'.count('a') }}",
    "{{ s|replace('l', 'L') }} {{ 'x'|default('d') }} {{ undefined_var|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }}",
    "{{ multiline|indent }}|{{ multiline|indent(2, true) }}|{{ multiline|indent(width='> ', first=true, blank=true) }}",
    "{{ '42'|int + 1 }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ '2.5'|float }} {{ 3|float }} {{ -4|abs }} {{ neg|abs }}",
    "{{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ n is number }} {{ f is float }} {{ n is integer }} {{ t is boolean }} {{ t is true }} {{ none is false }}",
    "{{ s is string }} {{ d is mapping }} {{ items is sequence }} {{ s is iterable }} {{ n is iterable }} {{ undefined_var is iterable }} {{ none is none }} {{ undefined_var is defined }} {{ n is defined }}",
    "{{ range(5)|list }} {{ range(2, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ 'abc' * 2 }} {{ [1] * 3 }} {{ 'x' * 0 }}",
    "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
    "{% for x in empty %}{{ x }}{% else %}empty!{% endfor %}{% for x in items if x > 1 %}{{ x }}/{{ loop.length }}{% endfor %}",
    "{% for x in items %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", "{% for c in 'héllo' %}{{ c }}.{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for x in items %}{{ loop.cycle('odd', 'even') }}{% endfor %}",
    "{% set x = 1 %}{% for i in items %}{% set x = i %}{{ x }}{% endfor %}{{ x }}", "{% set ns = namespace(total=0, found=false) %}{% for i in items %}{% set ns.total = ns.total + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.found }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t2 = (3, 4) %}{{ t2 }}", "{% set block %}inner {{ n }}{% endset %}[{{ block }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}",
    "{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}", "{% if n > 10 %}big{% elif n > 5 %}mid{% else %}small{% endif %}",
    "a\n  {% if t %}\n    b\n  {% endif %}\nc\n", "a  {%- if t -%}  b  {%- endif -%}  c", "  {{ n }}  \n  {# comment #}\n  x  {#- trimmed -#}  y\n",
    "{%+ if t %}kept{% endif %}\n  {%+ if t %}x{% endif %}", "line\n    {% for i in items %}\n    {{ i }}\n    {% endfor %}\nend\n\n",
    "{% raw %}{{ not rendered }}{% endraw %}", "{{ \"double\" }} {{ 'sin\\'gle' }} {{ 'a' 'b' }} {{ '\\u00e9\\x41\\101' }}",
    "{{ {'k': 1, 'j': [1, {'z': none}]} }} {{ {'k': 1}['k'] }} {{ ({'a': 1}).a }}", "{{ -n }} {{ +n }} {{ -f }} {{ n - -2 }} {{ (1, 2) }}",
    "{{ msgs|map(attribute='content')|join('|') }} {{ ['a', 'b']|map('upper')|list }}", "{% for m in msgs %}{% if m.role == 'tool' %}{{ msgs[loop.index0 - 1].role }}{% endif %}{% endfor %}",
    "{{ msgs|selectattr('n', 'gt', 1)|list|length }} {{ [1, 2, 3]|select('lt', 3)|list }} {{ items|select('in', [1, 3])|list }}",
    "{{ 'abc'|list }} {{ d|list }} {{ items|reverse|list }} {{ 'abc'|reverse }} {{ d|dictsort }} {{ [3, 1]|first }}",
    "{% if undefined_var %}x{% else %}y{% endif %}{{ undefined_var }}{{ undefined_var ~ 'z' }}{{ undefined_var == none }}", "{{ strftime_now('%Y-%m-%d %H:%M:%S %a %b') }}",
    "{{ 'a' in undefined_var }} {{ undefined_var in [1] }} {{ undefined_var|list }} {{ undefined_var|first }}|{{ (undefined_var or 'x') }}",
    "{{ 'é'|length }} {{ 'e\u0301'|length }} {{ '😀x'[0] }} {{ 'ab😀'[-1] }}", "{{ '%s' }} {{ 'a\\tb'|trim }} {{ '\u00a0x\u3000'|trim }} {{ '\u00a0x\u3000'.strip() }}",
    "{{ 10 / 3 }} {{ 2 / 3 * 3 }} {{ 1 / 7 }} {{ 1e300 * 10 }} {{ 123456789.123 }} {{ 3.0 }} {{ -0.0 }} {{ 100000000000000000.0 }}",
]
# Templates Jinja2 refuses to render (the C++ side must fail too).
SNIPPET_ERRORS = [
    "{{ undefined_var.attr }}", "{{ undefined_var[0] }}", "{{ undefined_var + 1 }}", "{{ 'a' + 1 }}", "{{ 1 / 0 }}",
    "{{ raise_exception('boom') }}", "{{ range(1000000)|length }}", "{{ d.a.b.c }}", "{{ none + 1 }}", "{% for x in n %}{% endfor %}",
    "{{ 1 < 'a' }}", "{% set x.y = 1 %}", "{{ n() }}",
]


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    return env


def main():
    env = make_env()
    out = []
    for name, specials in TEMPLATES.items():
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            template = env.from_string(f.read())
        for label, messages, extra in conversations():
            for add_generation_prompt in (True, False):
                variables = {"messages": messages, "tools": None, "documents": None,
                             "add_generation_prompt": add_generation_prompt}
                variables.update(specials)
                variables.update(extra)
                entry = {"template": name, "label": label, "variables": variables}
                try:
                    entry["rendered"] = template.render(**variables)
                except Exception as e:  # noqa: BLE001 - any failure must be a failure in C++ too
                    entry["error"] = f"{type(e).__name__}: {e}"
                out.append(entry)
    constructs = []
    for source in SNIPPETS + SNIPPET_ERRORS:
        entry = {"template": source}
        try:
            entry["rendered"] = env.from_string(source).render(**SNIPPET_VARS)
        except Exception as e:  # noqa: BLE001
            entry["error"] = f"{type(e).__name__}: {e}"
        if (source in SNIPPET_ERRORS) != ("error" in entry):
            raise SystemExit(f"unexpected outcome for {source!r}: {entry}")
        constructs.append(entry)
    with open(os.path.join(HERE, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "goldens": out,
                   "construct_variables": SNIPPET_VARS, "constructs": constructs}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in e for e in out)
    print(f"goldens.json: {len(out)} renderings ({errors} expected errors), "
          f"Jinja2 {jinja2.__version__}")


if __name__ == "__main__":
    main()
