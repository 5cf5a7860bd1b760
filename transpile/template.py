"""The Jinja template of an emitted file (templates/module.cu.j2), loaded from its compiled code.

Jinja compiles a template to Python on first use: 7-10 ms of a cold `tessera.load` for this one
(its lexer's regular expressions, its parser, its code generator, `compile`). The compiled code is
instead generated once, at development time, into `transpile/compiled_template.py`
(`python -m tessera.transpile.template_gen`), a module whose bytecode Python caches like any
other; it is used only when it was generated from this template text, with these Environment
options, by this Jinja version, and otherwise the template is compiled from its text as before
(slower, the same output). `tests/test_template.py` fails when the committed module is not what
the generator writes now.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import jinja2

from tessera.package_dir import package_dir

NAME = "module.cu.j2"

# The Environment's options: the compiled code depends on them, so they are part of its key.
OPTIONS: dict[str, Any] = {"undefined": jinja2.StrictUndefined, "trim_blocks": True, "lstrip_blocks": True,
                           "keep_trailing_newline": True, "autoescape": False}


def template_text(name: str) -> str:
    """The text of a file of the `tessera.templates` package."""
    return (package_dir("tessera.templates") / name).read_text("utf-8")


def template_key(text: str) -> str:
    """The SHA-256 of the template text and the Environment options, the compiled code's key."""
    options = ", ".join(f"{k}={getattr(v, '__name__', v)}" for k, v in sorted(OPTIONS.items()))
    return hashlib.sha256(f"{options}\n{text}".encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FunctionLoader(template_text), **OPTIONS)


@functools.lru_cache(maxsize=1)
def module_template() -> jinja2.Template:
    """The template, from its committed compiled code when that is current, else compiled now."""
    env = environment()
    from tessera.transpile import compiled_template as code

    if jinja2.__version__ == code.JINJA_VERSION and template_key(template_text(NAME)) == code.TEMPLATE_KEY:
        # What Jinja's own ModuleLoader does with a compiled template's module.
        return env.template_class.from_module_dict(env, vars(code), env.make_globals(None))
    return env.get_template(NAME)
