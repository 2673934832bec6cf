"""The README's platform matrix is what the adapters declare: regenerated from `ADAPTER_PATHS` it must be
the table the README holds (run `python manage.py platform_matrix --write` after changing an adapter), and
a changed declaration changes the table."""

from __future__ import annotations

import dataclasses

from django.core.management import call_command

from platforms.adapters.telegram import TelegramAdapter
from platforms.matrix import MATRIX_END, MATRIX_START, matrix_markdown, readme_path, readme_with_matrix
from platforms.registry import adapter_classes


def test_the_readme_matrix_is_the_one_the_adapters_declare():
    readme = readme_path().read_text(encoding="utf-8")

    assert readme.count(MATRIX_START) == 1
    assert readme.count(MATRIX_END) == 1
    assert readme_with_matrix(readme) == readme, "README differs: run `python manage.py platform_matrix --write`"


def test_every_adapter_has_a_row_and_a_changed_declaration_changes_its_row(monkeypatch):
    table = matrix_markdown()
    for platform in adapter_classes():
        assert f"(`{platform}`) |" in table

    fewer = dataclasses.replace(TelegramAdapter.capabilities, edit=False, event_types=("member.joined",))
    monkeypatch.setattr(TelegramAdapter, "capabilities", fewer)
    row = next(line for line in matrix_markdown().splitlines() if "(`telegram`)" in line)

    assert row.split(" | ")[3:7] == ["sent whole", "yes / yes", "add", "`member.joined`"]
    assert matrix_markdown() != table


def test_the_command_prints_the_table(capsys):
    call_command("platform_matrix")

    assert capsys.readouterr().out.strip() == matrix_markdown()
