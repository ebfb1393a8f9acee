import json

import pytest
from typer.testing import CliRunner

from internalize.cli import app


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args])

    return invoke


def read_summary(path):
    return json.loads((path / "summary.json").read_text())
