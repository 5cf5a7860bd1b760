# torch.library's custom operators as tessera.ops.torch uses them (stubs/torch/__init__.pyi says why
# there is a stub).
from collections.abc import Callable, Iterable
from typing import Any, overload

class CustomOpDef:
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def register_fake(self, fn: Callable[..., Any], /) -> Callable[..., Any]: ...
    def register_autograd(self, backward: Callable[..., Any], /, *,
                          setup_context: Callable[..., Any] | None = None) -> None: ...

@overload
def custom_op(name: str, fn: None = None, /, *, mutates_args: str | Iterable[str],
              device_types: str | Iterable[str] | None = None,
              schema: str | None = None) -> Callable[[Callable[..., object]], CustomOpDef]: ...
@overload
def custom_op(name: str, fn: Callable[..., object], /, *, mutates_args: str | Iterable[str],
              device_types: str | Iterable[str] | None = None, schema: str | None = None) -> CustomOpDef: ...
