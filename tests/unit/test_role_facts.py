"""The roles' facts answer the same for a command that prints nothing as for empty
output: pyinfra skips process() on no output and answers default(), and the roles test
the answer with `in` and == (a None there failed the slurmdbd role on a fresh node)."""
from __future__ import annotations

import inspect

import pytest
from pyinfra.api import FactBase

from roles._lib import facts

FACTS = [c for _, c in inspect.getmembers(facts, inspect.isclass)
         if issubclass(c, FactBase) and c.__module__ == facts.__name__ and c is not facts._Text]


def test_every_fact_is_checked():
    assert {c.__name__ for c in FACTS} >= {"Probe", "FileText", "ServiceActive", "Getent",
                                          "DeviceNode", "ContainerVirt", "MysqlGrants"}


@pytest.mark.parametrize("fact", FACTS, ids=lambda c: c.__name__)
def test_no_output_answers_like_empty_output(fact):
    assert fact().default() == fact().process([""])
    assert fact().default() is not None
