"""The hook lines (SPEC section 13): ``-- hook`` marks a hook script, ``-- on_failure|on_success|on_recovery
<script> [after=<n>]`` names one for a step (or, in a pipeline's ``_pipeline`` file, for all its steps).

Kept apart from ``grammar``'s handlers: ``grammar`` registers ``HANDLERS`` and freezes what they collect.
"""

from __future__ import annotations

from collections.abc import Callable

from lineage_defs.parse.line import _Line
from lineage_defs.parse.model import HookEvent, HookRef
from lineage_defs.parse.tokens import Token, _value_at

_SCRIPT_EXTENSIONS = (".sql", ".py", ".sh")


def _hook(ln: _Line, args: list[Token]) -> None:
    if args:
        ln.error(args[0], "'hook' takes no arguments", "write '-- hook' alone: the script's steps name it with on_failure/on_success/on_recovery")
    ln.b.values["hook"] = ln.loc(0, len("hook"))


def _event(event: HookEvent) -> Callable[[_Line, list[Token]], None]:
    word = event.value

    def handle(ln: _Line, args: list[Token]) -> None:
        example = f"{word} hooks/notify.py" + (" after=3" if event is HookEvent.FAILURE else "")
        if not args or args[0].key is not None:
            ln.error(args[0] if args else None, f"'{word}' needs the hook script's path", f"write {example}")
            return
        script = args[0]
        if not script.value.endswith(_SCRIPT_EXTENSIONS):
            ln.error(script, f"'{script.value}' is not a script path", f"name a .sql, .py or .sh script marked '-- hook', e.g. {example}")
            return
        after = 1
        if event is HookEvent.FAILURE:
            o = ln.options(args[1:], {"after": ln.integer}, what=word)
            if o is None:
                return
            if o.get("after") == 0:
                ln.error(_value_at(next(t for t in args if t.key == "after")), "after=0 never fires", "write after=<n> with n ≥ 1 failed runs in a row")
                return
            after = int(o.get("after", 1))  # type: ignore[call-overload]
        elif len(args) > 1:
            ln.error(args[1], f"'{word}' takes only the script's path", f"write {example}")
            return
        if any(h.event is event and h.script == script.value for h in ln.b.lists.get("hooks", ()) if isinstance(h, HookRef)):
            ln.error(script, f"'{word} {script.value}' given twice", "keep one")
            return
        ln.b.add("hooks", HookRef(event, script.value, after, ln.loc(script.start, len(script.text))))

    return handle


HANDLERS: dict[str, Callable[[_Line, list[Token]], None]] = {
    "hook": _hook,
    **{e.value: _event(e) for e in HookEvent},
}
