"""The request series' values (``domain/series.py``) beyond the projection rule's tests."""

from __future__ import annotations

from admission_service.domain.series import canonical_config
from hypothesis import given
from hypothesis import strategies as st


@given(st.dictionaries(st.text(), st.text(), max_size=6))
def test_a_configuration_in_canonical_form_is_its_pairs_sorted_by_key(
    config: dict[str, str],
) -> None:
    canonical = canonical_config(config)
    assert dict(canonical) == config
    keys = [key for key, _ in canonical]
    assert keys == sorted(keys)
    # Code point order is UTF-8 byte order: the stored JSON's order is the same.
    assert keys == sorted(keys, key=lambda key: key.encode("utf-8", "surrogatepass"))


def test_the_order_the_harness_sent_does_not_matter() -> None:
    assert canonical_config({"b": "2", "a": "1"}) == canonical_config({"a": "1", "b": "2"})
    assert canonical_config({"temperature": "0.2", "top_p": "1"}) == (
        ("temperature", "0.2"),
        ("top_p", "1"),
    )
