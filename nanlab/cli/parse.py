"""Typed values for the ``nanlab`` command line: ``--config`` and ``--set``; and the parser's
last touches (``finish_parser``): the course commands, and help texts in plain text.

``--config KEY=VALUE`` is typed by the TrainConfig field it names (``model.FIELD`` by the
GPTConfig field), ``--set KEY=VALUE`` by the fault's ``Param`` default; the parsing is
strict and every mistake is one :class:`~nanlab.errors.NanlabError` line naming the value
and what is allowed. Whether a value is in range stays TrainConfig's (and Param's) to say.

>>> parse_config(["lr=1e-3", "model.n_layer=4"])
{'lr': 0.001, 'model': {'n_layer': 4}}
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import types
import typing

from nanlab.errors import NanlabError, check_range

SEED_MAX = 2**63 - 1  # torch.manual_seed's int64 range; TrainConfig has no upper bound
NOT_SETTABLE = {"out_dir": "--out PATH sets the run folder",
                "progress": "the progress bar is on, and off with --json"}
_TRUE, _FALSE, _NONE = ("true", "yes", "1"), ("false", "no", "0"), ("none", "null")
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# reStructuredText in help texts: a role (:func:`~a.b`), a literal (``x``), a reference (`x`_)
_ROLE = re.compile(r":[\w.:-]+:`(~?)([^`]*)`")
_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`_?")


def parse_value(name: str, text: str, kind):
    """``text`` as a value of type ``kind`` (a dataclass field's annotation), strictly.

    Booleans: true/false/yes/no/1/0; ints: digits only; floats: finite numbers;
    ``X | None`` also takes ``none``; tuples and lists: comma-separated values.

    >>> parse_value("grad_scaler", "yes", bool | None), parse_value("lr", "1e-3", float)
    (True, 0.001)
    >>> parse_value("dims", "4,8", tuple[int, ...])
    (4, 8)
    >>> parse_value("qk_norm", "maybe", bool)
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: qk_norm='maybe' is not a boolean; allowed: true, false, yes, no, 1, 0
    """
    text = str(text).strip()
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    optional = False
    if origin in (types.UnionType, typing.Union):
        options = [a for a in args if a is not type(None)]
        optional = len(options) < len(args)
        if optional and text.lower() in _NONE:
            return None
        if len(options) != 1:
            raise NanlabError(f"{name} cannot be set from the command line (type {kind})")
        kind = options[0]
        origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (tuple, list):
        parts = [p.strip() for p in text.split(",")] if text else []
        fixed = origin is tuple and args and args[-1] is not Ellipsis
        kinds = list(args) if fixed else [args[0] if args else str] * len(parts)
        what = f"{len(kinds)} comma-separated values" if fixed else "comma-separated values"
        try:
            if len(parts) != len(kinds):
                raise NanlabError(f"{len(parts)} given")
            values = [parse_value(name, p, k) for p, k in zip(parts, kinds, strict=True)]
        except NanlabError as e:
            raise NanlabError(f"{name}={text!r} is not allowed; allowed: {what} ({e})") from None
        return origin(values)
    orless = ", or none" if optional else ""
    if kind is bool:
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise NanlabError(f"{name}={text!r} is not a boolean; allowed: true, false, yes, no, "
                          f"1, 0{orless}")
    if kind is int:
        if _INT.fullmatch(text):
            return int(text)
        raise NanlabError(f"{name}={text!r} is not an integer; allowed: an integer, digits "
                          f"only{orless}")
    if kind is float:
        if _FLOAT.fullmatch(text):
            return float(text)
        what = "a finite number" if text.lower().lstrip("+-") in ("nan", "inf", "infinity") \
            else "a number"
        raise NanlabError(f"{name}={text!r} is not {what}; allowed: a finite number such as "
                          f"0.005 or 5e-3{orless}")
    if kind is str:
        return text
    raise NanlabError(f"{name} cannot be set from the command line (type {kind})")


def _split(pair: str, flag: str) -> tuple[str, str]:
    key, sep, text = pair.partition("=")
    if not sep or not key.strip():
        raise NanlabError(f"{flag} {pair!r} is not KEY=VALUE; allowed: {flag} KEY=VALUE, e.g. "
                          + ("--config lr=1e-3" if flag == "--config" else "--set at_step=20"))
    return key.strip(), text


def _no_twice(seen: dict, key: str, text: str, value) -> None:
    if key in seen and seen[key][0] != value:
        raise NanlabError(f"{key} is given twice, {seen[key][1]!r} and {text.strip()!r}; "
                          "allowed: one value per setting")
    seen[key] = (value, text.strip())


def _unknown(key: str, allowed: list[str], what: str) -> NanlabError:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return NanlabError(f"{key!r} is not {what}{hint}; allowed: {', '.join(allowed)}")


def parse_config(pairs: list[str]) -> dict:
    """``--config KEY=VALUE`` pairs as TrainConfig changes, typed by the dataclass's fields;
    ``model.FIELD=VALUE`` sets a GPTConfig field. The values are checked by TrainConfig.

    >>> parse_config(["lr=1e-3", "grad_scaler=no", "model.n_layer=4"])
    {'lr': 0.001, 'grad_scaler': False, 'model': {'n_layer': 4}}
    """
    from nanlab.train.trainer import TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    nested = {k for k, v in hints.items() if dataclasses.is_dataclass(v)}
    changes: dict = {}
    seen: dict = {}
    for pair in pairs:
        key, text = _split(pair, "--config")
        top, _, sub = key.partition(".")
        if top in NOT_SETTABLE:
            raise NanlabError(f"--config {pair!r} is not allowed; allowed: {NOT_SETTABLE[top]}")
        if top not in hints:
            raise _unknown(key, sorted(set(hints) - set(NOT_SETTABLE)), "a training setting "
                           "(TrainConfig field; model fields as model.FIELD)")
        if top in nested:
            fields = typing.get_type_hints(hints[top])
            names = [f"{top}.{f}" for f in fields]
            if not sub:
                example = f"{top}.n_layer=4" if f"{top}.n_layer" in names else f"{names[0]}=..."
                raise NanlabError(f"--config {pair!r} is not allowed: {top} is a config of its "
                                  f"own; allowed: one field at a time, e.g. {example}; "
                                  f"fields: {', '.join(names)}")
            if sub not in fields:
                raise _unknown(key, names, f"a {hints[top].__name__} field")
            value = parse_value(key, text, fields[sub])
            _no_twice(seen, key, text, value)
            changes.setdefault(top, {})[sub] = value
        elif sub:
            raise _unknown(key, sorted(set(hints) - set(NOT_SETTABLE)), "a training setting")
        else:
            value = parse_value(key, text, hints[top])
            _no_twice(seen, key, text, value)
            changes[key] = value
    if "seed" in changes:  # TrainConfig has no upper bound; torch.manual_seed does
        check_range("seed", changes["seed"], 0, SEED_MAX, integer=True)
    return changes


def parse_fault_params(fault_name: str | None, pairs: list[str]) -> dict:
    """``--set KEY=VALUE`` pairs as a fault's parameters, typed by each ``Param.default``
    and checked (range, choices) before anything runs.

    >>> parse_fault_params("nan_input", ["at_step=20", "value=inf"])
    {'at_step': 20, 'value': 'inf'}
    """
    from nanlab.faults import get_fault
    from nanlab.train.trainer import TrainConfig

    if not pairs:
        return {}
    if not fault_name:
        raise NanlabError(f"--set {pairs[0]!r} is not allowed without a fault; allowed: "
                          "--fault NAME --set KEY=VALUE (see: nanlab faults)")
    fault = get_fault(fault_name)
    params: dict = {}
    seen: dict = {}
    for pair in pairs:
        key, text = _split(pair, "--set")
        spec = fault.params.get(key)
        if spec is None:
            hint = ""
            if key in ("fix", "fixes"):
                hint = f"; a fix is --fix {text.split(',')[0].strip() or 'NAME'}"
            elif key.partition(".")[0] == "model":
                hint = "; the model is a training setting: --config model.FIELD=VALUE"
            elif key in TrainConfig.__dataclass_fields__:
                hint = f"; {key} is a training setting: --config {key}=VALUE"
            own = ", ".join(sorted(fault.params)) or "none"
            raise NanlabError(f"--set {pair!r}: fault {fault.name!r} has no parameter {key!r}; "
                              f"allowed: {own}{hint}")
        kind = type(spec.default) if type(spec.default) in (bool, int, float) else str
        value = spec.check(fault.name, key, parse_value(f"{fault.name}.{key}", text, kind))
        _no_twice(seen, key, text, value)
        params[key] = value
    return params


def plain(text: str) -> str:
    """A help text without reStructuredText markup: a docstring reads well in the API
    docs, but argparse prints it as it is.

    >>> plain("The ``nanlab`` command line; see :func:`~nanlab.debug.diagnose`::")
    'The nanlab command line; see diagnose:'
    >>> plain(":class:`nanlab.guard.Guard` and `RFC 4180`_")
    'nanlab.guard.Guard and RFC 4180'
    """
    text = _ROLE.sub(lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], text)
    text = _LITERAL.sub(lambda m: m[1] or m[2], text)
    return re.sub(r"::$", ":", text, flags=re.M)


def _plain_help(parser: argparse.ArgumentParser) -> None:
    parser.description = parser.description and plain(parser.description)
    parser.epilog = parser.epilog and plain(parser.epilog)
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for listed in action._choices_actions:  # the sub-command list in the parent's help
                listed.help = listed.help and plain(listed.help)
            for sub in action.choices.values():
                _plain_help(sub)


def _course_missing(subparsers, err: Exception) -> None:
    """``nanlab course`` where the course extra is not installed: the command exists, and
    running it says in one line what to install (the rest of the command line works)."""
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    missing = getattr(err, "name", None)  # an ImportError names the module it missed
    if "nanlab[" not in reason and missing:  # not the extra: say what is missing, not it
        reason = f"the package {missing.split('.')[0]!r} is not installed ({reason})"
    course = subparsers.add_parser("course", help="sync, run, build or check the notebooks "
                                   "(needs: pip install 'nanlab[course]')",
                                   description=f"nanlab course is not available: {reason}")
    course.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def refuse(args) -> int:
        raise NanlabError(f"nanlab course: {reason}")
    course.set_defaults(func=refuse)


def finish_parser(parser: argparse.ArgumentParser, subparsers) -> argparse.ArgumentParser:
    """The parser's last touches: ``nanlab course`` (from :mod:`nanlab.course`, which needs
    the ``course`` extra; without it, a command that says how to install it), then every
    help text, sub-commands' too, as plain text. Returns ``parser``.

    >>> p = argparse.ArgumentParser(description="The ``nanlab`` command line")
    >>> finish_parser(p, p.add_subparsers()).description
    'The nanlab command line'
    """
    try:
        from nanlab.course import notebooks
    except (ImportError, NanlabError) as err:  # the extra is missing (require: NanlabError)
        _course_missing(subparsers, err)
    else:
        notebooks.add_parser(subparsers)
    _plain_help(parser)
    return parser


__all__ = ["NOT_SETTABLE", "SEED_MAX", "finish_parser", "parse_config", "parse_fault_params",
           "parse_value", "plain"]
