"""The Jinja template of an emitted file (templates/module.cu.j2), rendered from its compiled code.

Jinja compiles a template to Python on first use: 7-10 ms of a cold `tessera.load` for this one
(its lexer's regular expressions, its parser, its code generator, `compile`), after importing
Jinja (15 ms). The compiled code is instead generated once, at development time, into
`transpile/emit/compiled_template.py` (`python -m tessera.transpile.emit.template_gen`), a module whose
bytecode Python caches like any other, and which calls only the few helpers of Jinja's runtime
that `transpile/emit/template_runtime.py` provides: rendering imports no Jinja. The module is used only
when it was generated from this template text with these Environment options; otherwise (a
template edited without running the generator) the template is compiled from its text by Jinja
as before (slower, the same output). `tests/transpile/emit/test_template.py` fails when the committed module is
not what the generator writes now.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tessera.base.package_dir import package_dir
from tessera.transpile.emit import template_runtime

if TYPE_CHECKING:
    import jinja2

NAME = "module.cu.j2"

# The Environment's options (`undefined` by the name of Jinja's class): the compiled code depends
# on them, so they are part of its key.
OPTIONS: dict[str, Any] = {"undefined": "StrictUndefined", "trim_blocks": True, "lstrip_blocks": True,
                           "keep_trailing_newline": True, "autoescape": False}


def template_text(name: str) -> str:
    """The text of a file of the `tessera.templates` package."""
    return (package_dir("tessera.templates") / name).read_text("utf-8")


def template_key(text: str) -> str:
    """The SHA-256 of the template text and the Environment options, the compiled code's key."""
    options = ", ".join(f"{k}={v}" for k, v in sorted(OPTIONS.items()))
    return hashlib.sha256(f"{options}\n{text}".encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """Jinja's Environment with OPTIONS (the generator's, and the renderer's for a stale module)."""
    import jinja2

    return jinja2.Environment(loader=jinja2.FunctionLoader(template_text),
                              **{**OPTIONS, "undefined": getattr(jinja2, OPTIONS["undefined"])})


@functools.lru_cache(maxsize=1)
def module_renderer() -> Callable[..., str]:
    """`render(**variables)`: the text of the template for these variables, from its committed
    compiled code when that is current, else from the template compiled by Jinja now."""
    from tessera.transpile.emit import compiled_template as code

    if template_key(template_text(NAME)) == code.TEMPLATE_KEY:
        return functools.partial(_render, code.root)
    return environment().get_template(NAME).render


def _render(root: Callable[[template_runtime.Context], Any], **variables: Any) -> str:
    return template_runtime.render(root, variables)
