"""Labels: their syntax, label selectors, node selector requirements and node affinity, as upstream decides.

- Label keys and values (k8s.io/apimachinery/pkg/util/validation: `IsQualifiedName`, `IsValidLabelValue`,
  `IsDNS1123Label`), with the API server's messages.
- Requirements (k8s.io/apimachinery/pkg/labels `Requirement.Matches`; core/v1 `NodeSelectorRequirement`):
  `In NotIn Exists DoesNotExist Gt Lt`, and Karpenter's `Gte Lte`. A requirement upstream would refuse to
  build (a bad key or value, `In` without values, `Exists` with values, `Gt` without one integer) matches
  nothing, as the scheduler's parse error makes it.
- Label selectors (metav1 `LabelSelectorAsSelector`): `matchLabels` and `matchExpressions`; None selects
  nothing, `{}` everything. Their text form (`labels.Parse`, `?labelSelector=`): `parse_selector`.
- Node selector terms and node affinity (k8s.io/component-helpers/scheduling/corev1/nodeaffinity): terms
  are ORed, a term's `matchExpressions` and `matchFields` (`metadata.name`, `In`/`NotIn` of one value) ANDed,
  an empty term matches nothing, an invalid term is skipped; a pod fits a node when its `nodeSelector` and
  its required node affinity both do; preferred terms score the sum of the weights that match.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

__all__ = [
    "DNS1123_LABEL_MSG", "DNS1123_SUBDOMAIN_MSG", "LABEL_VALUE_MSG", "QUALIFIED_NAME_MSG", "SelectorError",
    "DNS1123_LABEL_RULE", "LABEL_KEY_RULE", "LABEL_VALUE_RULE", "dns1123_label_words", "label_key_words",
    "label_value_words",
    "compile_selector", "dns1123_label_errors", "dns1123_subdomain_errors", "label_key_errors", "label_selector_matches", "label_value_errors",
    "node_selector_matches", "node_selector_terms_match", "parse_selector", "pod_matches_node",
    "preferred_node_affinity_score", "requirement_errors", "requirement_matches", "selector_matches",
]

# ---------------------------------------------------------------------------------------------------
# Label syntax (messages in the Kubernetes API server's words)

# \Z, not $: `$` also matches before a final newline, which Go's regexp (and the API server) does not.
LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")

QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


# The same rules in words, for people (the console's forms and API answers); the API server's words above
# stay for what must read as Kubernetes' own (the emulator, a cluster's objects).
DNS1123_LABEL_RULE = "lowercase letters, digits and '-'; start and end with a letter or digit; at most 63 characters"
LABEL_VALUE_RULE = ("letters, digits, '-', '_' and '.'; start and end with a letter or digit; at most 63 characters; "
                    "or empty")
LABEL_KEY_RULE = ("a name of letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most 63 "
                  "characters, optionally after a prefix of lowercase letters, digits, '-' and '.' (at most 253 "
                  "characters) and '/', e.g. example.com/gpu-type")


def _problem(text: str, allowed: str, limit: int) -> str:
    """What is wrong with `text`, in words: the first of too long, characters not allowed, a bad end."""
    if not text:
        return "it is empty"
    if len(text) > limit:
        return f"it has {len(text)} characters"
    bad = sorted({c for c in text if c not in allowed}, key=text.index)
    if bad:
        words = (["capital letters"] if any(c.isupper() for c in bad) else []) + [
            "a space" if c == " " else f"'{c}'" for c in bad if not c.isupper()][:5]
        return f"“{text}” holds " + (", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0])
    return f"“{text}” starts or ends with '{text[0] if not text[0].isalnum() else text[-1]}'"


_LOWER = "abcdefghijklmnopqrstuvwxyz0123456789"
_LABEL_CHARS = _LOWER + "ABCDEFGHIJKLMNOPQRSTUVWXYZ-_."


def dns1123_label_words(name: str) -> list[str]:
    """A DNS-1123 label's refusal in words (empty list: valid): "Use lowercase letters, ... (“R&D” holds '&')."."""
    if not dns1123_label_errors(name):
        return []
    return [f"Use {DNS1123_LABEL_RULE} ({_problem(name, _LOWER + '-', 63)})."]


def label_value_words(value: str) -> list[str]:
    if not label_value_errors(value):
        return []
    return [f"Use {LABEL_VALUE_RULE} ({_problem(value, _LABEL_CHARS, 63)})."]


def label_key_words(key: str) -> list[str]:
    if not label_key_errors(key):
        return []
    parts = key.split("/")
    if len(parts) > 2:
        problem = f"“{key}” has more than one '/'"
    elif len(parts) == 2 and label_key_errors(parts[0] + "/x"):
        problem = ("the prefix before '/' is empty" if not parts[0]
                   else "the prefix " + _problem(parts[0], _LOWER + "-.", 253).replace("it has", "has"))
    else:
        problem = _problem(parts[-1], _LABEL_CHARS, 63)
    return [f"Use {LABEL_KEY_RULE} ({problem})."]


def label_key_errors(key: str) -> list[str]:
    """Errors of a label key, as Kubernetes' IsQualifiedName reports them (empty list: valid)."""
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        errors = []
        if len(prefix) > 253:
            errors.append("prefix part must be no more than 253 characters")
        if not DNS1123_SUBDOMAIN_RE.match(prefix):
            errors.append("prefix part " + DNS1123_SUBDOMAIN_MSG)
        if errors:
            return errors
    else:
        return [
            "a qualified name " + QUALIFIED_NAME_MSG.removeprefix("name part ")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        return ["name part must be non-empty"]
    errors = []
    if len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not LABEL_NAME_RE.match(name):
        errors.append(QUALIFIED_NAME_MSG)
    return errors


def label_value_errors(value: str) -> list[str]:
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not LABEL_VALUE_RE.match(value):
        errors.append(LABEL_VALUE_MSG)
    return errors


def dns1123_subdomain_errors(name: str) -> list[str]:
    """Errors of a DNS-1123 subdomain (the names of most Kubernetes objects), in the API server's words."""
    errors = []
    if len(name) > 253:
        errors.append("must be no more than 253 characters")
    if not DNS1123_SUBDOMAIN_RE.match(name):
        errors.append(DNS1123_SUBDOMAIN_MSG)
    return errors


def dns1123_label_errors(name: str) -> list[str]:
    errors = []
    if len(name) > 63:
        errors.append("must be no more than 63 characters")
    if not DNS1123_LABEL_RE.match(name):
        errors.append(DNS1123_LABEL_MSG)
    return errors


@lru_cache(maxsize=8192)
def _key_ok(key: str) -> bool:
    return not label_key_errors(key)


@lru_cache(maxsize=8192)
def _value_ok(value: str) -> bool:
    return not label_value_errors(value)


# ---------------------------------------------------------------------------------------------------
# Requirements

# Operators of a node selector requirement (core/v1), Karpenter's Gte/Lte, and those of a label selector.
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
KARPENTER_OPERATORS = NODE_SELECTOR_OPERATORS + ("Gte", "Lte")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_NUMERIC = {"Gt": int.__gt__, "Lt": int.__lt__, "Gte": int.__ge__, "Lte": int.__le__}
_INT64_RE = re.compile(r"^[+-]?[0-9]+\Z")


def _int64(text: Any) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None."""
    if not isinstance(text, str) or not _INT64_RE.match(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def _values(req: Mapping[str, Any]) -> list[str]:
    values = req.get("values") or []
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        return [str(values)]
    return ["" if v is None else str(v) for v in values]


def requirement_errors(req: Any, operators: Sequence[str] = KARPENTER_OPERATORS) -> list[str]:
    """Why upstream would refuse to build this requirement (labels.NewRequirement); empty when valid."""
    if not isinstance(req, Mapping):
        return ["must be a mapping with key, operator and values"]
    key, operator, values = req.get("key"), req.get("operator"), _values(req)
    errors = []
    if not isinstance(key, str) or not _key_ok(key):
        errors.extend(f"key: {e}" for e in (label_key_errors(key) if isinstance(key, str) else ["must be a string"]))
    if operator not in operators:
        supported = ", ".join(f'"{o}"' for o in operators)
        errors.append(f"operator: Unsupported value: {operator!r}: supported values: {supported}")
    elif operator in ("In", "NotIn") and not values:
        errors.append("values: Required value: for 'in', 'notin' operators, values set can't be empty")
    elif operator in ("Exists", "DoesNotExist") and values:
        errors.append("values: Invalid value: values set must be empty for exists and does not exist")
    elif operator in _NUMERIC:
        if len(values) != 1:
            errors.append(f"values: Required value: for '{operator}' operator, exactly one value is required")
        elif _int64(values[0]) is None:
            errors.append(f"values[0]: Invalid value: {values[0]!r}: for '{operator}' operator, the value must "
                          "be an integer")
    errors.extend(f"values[{i}]: {e}" for i, v in enumerate(values) if not _value_ok(v) for e in label_value_errors(v))
    return errors


def _matches(key: str, operator: str, values: list[str], labels: Mapping[str, str]) -> bool:
    present = key in labels
    if operator == "In":
        return present and str(labels[key]) in values
    if operator == "NotIn":
        return not present or str(labels[key]) not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    have, bound = _int64(labels.get(key)), _int64(values[0])
    return have is not None and bound is not None and _NUMERIC[operator](have, bound)


def requirement_matches(req: Mapping[str, Any], labels: Mapping[str, str],
                        operators: Sequence[str] = KARPENTER_OPERATORS) -> bool:
    """A node selector requirement (`key`, `operator`, `values`) against labels: `In NotIn Exists
    DoesNotExist Gt Lt` (and Karpenter's `Gte Lte`). `NotIn` and `DoesNotExist` hold when the label is absent;
    `Gt`/`Lt` compare integers (a label that is no integer fails). An invalid requirement matches nothing."""
    if requirement_errors(req, operators):
        return False
    return _matches(req["key"], req["operator"], _values(req), labels or {})


def selector_matches(requirements: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """Every requirement holds (an empty list: everything matches), e.g. the result of `parse_selector`."""
    return all(requirement_matches(r, labels) for r in requirements)


def compile_selector(requirements: Sequence[Mapping[str, Any]]) -> Callable[[Mapping[str, str]], bool]:
    """`selector_matches` with the requirements checked once: a predicate on labels, for many objects."""
    if any(requirement_errors(r) for r in requirements):
        return lambda labels: False
    parts = [(r["key"], r["operator"], _values(r)) for r in requirements]
    return lambda labels: all(_matches(key, operator, values, labels) for key, operator, values in parts)


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1 LabelSelector (`matchLabels` AND `matchExpressions` of `In NotIn Exists DoesNotExist`) against
    labels. None selects nothing and `{}` everything (LabelSelectorAsSelector); an invalid one nothing."""
    if selector is None or not isinstance(selector, Mapping):
        return False
    labels = labels or {}
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, Sequence):
        return False
    requirements = [{"key": k, "operator": "In", "values": [v]} for k, v in match_labels.items()]
    requirements += list(expressions)
    return all(requirement_matches(r, labels, LABEL_SELECTOR_OPERATORS) for r in requirements)


# ---------------------------------------------------------------------------------------------------
# The text form of a label selector (`a=b,c!=d,e in (f,g),!h,i>3`)

class SelectorError(ValueError):
    """A label selector text that labels.Parse refuses (answered as 400 BadRequest by an API server)."""


_SPECIAL = frozenset("=!(),<>")
_TEXT_OPERATORS = {"=": "In", "==": "In", "!=": "NotIn", "in": "In", "notin": "NotIn", ">": "Gt", "<": "Lt"}


def _lex(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: kind is `id` for identifiers, else the operator or bracket itself."""
    tokens, i, end = [], 0, len(text)
    while i < end:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in _SPECIAL:
            two = text[i:i + 2]
            if two in ("==", "!="):
                tokens.append((two, two))
                i += 2
            else:
                tokens.append((c, c))
                i += 1
        else:
            j = i
            while j < end and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            tokens.append(("id", text[i:j]))
            i = j
    return tokens


def parse_selector(text: str | None) -> list[dict[str, Any]]:
    """The requirements of a label selector's text (labels.Parse), as node selector requirement dicts
    (`=`/`==`/`in` -> In, `!=`/`notin` -> NotIn, `k` -> Exists, `!k` -> DoesNotExist, `>`/`<` -> Gt/Lt).
    An empty text gives [] (everything). Raises SelectorError with upstream's reason otherwise."""
    tokens = _lex(text or "")
    out: list[dict[str, Any]] = []
    pos = 0

    def peek() -> tuple[str, str]:
        return tokens[pos] if pos < len(tokens) else ("end", "")

    def take() -> tuple[str, str]:
        nonlocal pos
        token = peek()
        pos += 1
        return token

    while pos < len(tokens):
        kind, word = take()
        if kind == "!":
            kind, key = take()
            if kind != "id":
                raise SelectorError(f"found '{key}', expected: identifier after '!'")
            req: dict[str, Any] = {"key": key, "operator": "DoesNotExist", "values": []}
        elif kind == "id":
            key = word
            kind, word = peek()
            if kind in (",", "end"):
                req = {"key": key, "operator": "Exists", "values": []}
            elif kind == "id" and word in ("in", "notin"):
                operator = _TEXT_OPERATORS[word]
                take()
                kind, word = take()
                if kind != "(":
                    raise SelectorError(f"found '{word}', expected: '('")
                values: list[str] = []
                expect_value = True
                while True:
                    kind, word = take()
                    if kind == "id" and expect_value:
                        values.append(word)
                        expect_value = False
                    elif kind == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                    elif kind == ")":
                        if expect_value:
                            values.append("")  # `()` and `(a,)` hold the empty value
                        break
                    else:
                        raise SelectorError(f"found '{word}', expected: ',' or ')'")
                req = {"key": key, "operator": operator, "values": sorted(set(values))}
            elif kind in ("=", "==", "!=", "<", ">"):
                take()
                operator = _TEXT_OPERATORS[kind]
                kind, word = peek()
                if kind == "id":
                    take()
                    value = word
                elif kind in (",", "end") and operator in ("In", "NotIn"):
                    value = ""
                else:
                    raise SelectorError(f"found '{word}', expected: identifier")
                req = {"key": key, "operator": operator, "values": [value]}
            else:
                raise SelectorError(f"found '{word}', expected: in, notin, =, ==, !=, gt, lt")
        else:
            raise SelectorError(f"found '{word}', expected: !, identifier, or 'end of string'")
        errors = requirement_errors(req, NODE_SELECTOR_OPERATORS)
        if errors:
            raise SelectorError(f"invalid requirement {req['key']!r}: " + "; ".join(errors))
        out.append(req)
        kind, word = take()
        if kind == "end":
            break
        if kind != ",":
            raise SelectorError(f"found '{word}', expected: ',' or 'end of string'")
        if peek()[0] == "end":
            raise SelectorError("found '', expected: identifier after ','")
    return out


# ---------------------------------------------------------------------------------------------------
# Node selector terms and node affinity

def _node_parts(node: Mapping[str, Any] | None) -> tuple[Mapping[str, str], str]:
    metadata = (node or {}).get("metadata") or {}
    return metadata.get("labels") or {}, str(metadata.get("name") or "")


def _field_requirement_ok(req: Any) -> bool:
    return (isinstance(req, Mapping) and req.get("operator") in ("In", "NotIn") and len(_values(req)) == 1)


def _term_matches(term: Any, labels: Mapping[str, str], name: str) -> bool:
    """One NodeSelectorTerm: matchExpressions AND matchFields; empty or invalid: no match."""
    if not isinstance(term, Mapping):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    if any(requirement_errors(r, NODE_SELECTOR_OPERATORS) for r in expressions):
        return False
    if not all(_field_requirement_ok(f) for f in fields):
        return False
    if not all(_matches(r["key"], r["operator"], _values(r), labels) for r in expressions):
        return False
    if fields and name:  # upstream reads no fields of a node without a name
        node_fields = {"metadata.name": name}
        for f in fields:
            have = node_fields.get(str(f.get("key")), "")
            if (have == _values(f)[0]) != (f["operator"] == "In"):
                return False
    return True


def node_selector_terms_match(terms: Sequence[Mapping[str, Any]] | None, node: Mapping[str, Any]) -> bool:
    """NodeSelectorTerms (ORed) against a Node object (`metadata.labels`, `metadata.name`). No terms: no
    match (a required node affinity with no terms admits no node)."""
    labels, name = _node_parts(node)
    return any(_term_matches(term, labels, name) for term in terms or [])


def _required_affinity(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return required if isinstance(required, Mapping) else None


def node_selector_matches(node_selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A `nodeSelector` map: every key present with the same value (labels.SelectorFromSet; empty: all)."""
    if node_selector is not None and not isinstance(node_selector, Mapping):
        return False
    labels = labels or {}
    return all(key in labels and str(labels[key]) == str(value) for key, value in (node_selector or {}).items())


def pod_matches_node(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The pod's `spec.nodeSelector` (every pair) AND its required node affinity (when it has one) admit the
    node (GetRequiredNodeAffinity(pod).Match(node))."""
    labels, _ = _node_parts(node)
    if not node_selector_matches((pod.get("spec") or {}).get("nodeSelector"), labels):
        return False
    required = _required_affinity(pod)
    if required is None:
        return True
    return node_selector_terms_match(required.get("nodeSelectorTerms") or [], node)


def preferred_node_affinity_score(pod: Mapping[str, Any], node: Mapping[str, Any]) -> int:
    """Σ of the weights of the pod's preferred node affinity terms the node matches (weight 0 and invalid
    terms count nothing)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    labels, name = _node_parts(node)
    score = 0
    for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        if not isinstance(term, Mapping):
            continue
        weight = term.get("weight") or 0
        if isinstance(weight, int) and weight and _term_matches(term.get("preference"), labels, name):
            score += weight
    return score
