"""Quantities in human units (ui/formats.py): bytes in binary units up to TiB, CPU in cores; the same
functions serve every page (Karpenter's limits, the node page, the reasons of explain.py)."""
from decimal import Decimal

import pytest

# As the pool page reads the quantities a NodePool carries (its limits, what is provisioned).
from provisioning.karpenter import quantity as parse_quantity
from ui.formats import bytes_text, cores_text, mib_text, millicores_text, quantity_text


@pytest.mark.parametrize(("raw", "text"), [
    ("2147483648Ki", "2 TiB"), ("8Ti", "8 TiB"), ("1536Mi", "1.5 GiB"), ("244Gi", "244 GiB"), ("1000Gi", "1000 GiB"),
    ("129843200Ki", "124 GiB"), ("100Mi", "100 MiB"), ("15.75Gi", "15.8 GiB"), ("512Mi", "512 MiB"), ("1e3", "1000 B"), ("0", "0 B"), ("4Pi", "4 PiB"),
])
def test_memory_quantities_read_in_binary_units(raw, text):
    assert bytes_text(parse_quantity(raw)) == text
    assert quantity_text("memory", parse_quantity(raw)) == text
    assert quantity_text("ephemeral-storage", parse_quantity(raw)) == text


@pytest.mark.parametrize(("raw", "text"), [("500m", "0.5 cores"), ("1", "1 core"), ("960", "960 cores"),
                                           ("1500m", "1.5 cores"), ("0", "0 cores")])
def test_cpu_reads_in_cores(raw, text):
    assert quantity_text("cpu", parse_quantity(raw)) == text
    assert cores_text(parse_quantity(raw)) == text
    assert millicores_text(parse_quantity(raw) * 1000) == text


def test_gpus_nodes_and_unknown_values():
    assert quantity_text("nvidia.com/gpu", parse_quantity("16")) == "16"
    assert quantity_text("nodes", Decimal("1E+1")) == "10"
    assert bytes_text(None) == mib_text(None) == cores_text(None) == quantity_text("memory", None) == "—"
    assert mib_text(40960) == "40 GiB" and mib_text(16384) == "16 GiB" and mib_text(2500) == "2.4 GiB"


def test_the_template_filters_use_them():
    from django.template import Context, Template

    html = Template('{% load console_ui %}{{ b|human_bytes }} · {{ m|human_mib }} · {{ c|human_millicores }} · '
                    '{{ q|human_quantity:"memory" }}').render(Context(
                        {"b": 2**41, "m": 81920, "c": 32000, "q": parse_quantity("2147483648Ki")}))
    assert html == "2 TiB · 80 GiB · 32 cores · 2 TiB"
