"""The example's SuperLink connections, written into Flower's configuration file.

    PYTHONPATH=examples/fleet python -m fleet_app.connections [--address HOST:PORT]
        [--root-certificates CA_FILE]

Flower 1.42 reads SuperLink connections only from ``$FLWR_HOME/config.toml`` (default
``~/.flwr``; created on first use holding ``local`` and ``supergrid``). An app's
``[tool.flwr.federations]`` is migrated there by the first ``flwr run``, which then comments
the section out of the app's ``pyproject.toml`` (``flwr/cli/config_migration.py``), so the
example keeps its connections under ``[tool.irgrad.superlink]`` in its ``pyproject.toml``
and this writes them with Flower's own writer: ``local-simulation`` (10 virtual clients, the
default connection from now on) and ``local-deployment`` (``127.0.0.1:8000``, insecure;
``--address`` another SuperLink, ``--root-certificates`` its CA for TLS instead). Other
connections in the file are kept. Run it again to change them.
"""
from __future__ import annotations

import argparse
import sys
import tomli  # flwr requires it (tomllib is Python 3.11+)
from pathlib import Path

from flwr.cli.flower_config import (parse_superlink_connection, read_flower_config,
                                    set_default_superlink_connection, write_superlink_connection)
from flwr.supercore.utils import get_flwr_home

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def connections() -> tuple[dict[str, dict], str]:
    """The example's connections (name -> Flower's connection table) and the default one."""
    table = tomli.loads(PYPROJECT.read_text())["tool"]["irgrad"]["superlink"]
    default = table["default"]
    return {k: v for k, v in table.items() if isinstance(v, dict)}, default


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", help="local-deployment's SuperLink (default: pyproject.toml's, 127.0.0.1:8000)")
    p.add_argument("--root-certificates", type=Path, help="the SuperLink's CA certificate: TLS instead of insecure")
    args = p.parse_args(argv)
    found, default = connections()
    deployment = dict(found["local-deployment"])
    if args.address:
        deployment["address"] = args.address
    if args.root_certificates:
        if not args.root_certificates.is_file():
            p.error(f"--root-certificates: no file {args.root_certificates}")
        deployment.pop("insecure", None)
        deployment["root-certificates"] = str(args.root_certificates.resolve())
    found["local-deployment"] = deployment
    read_flower_config()  # creates $FLWR_HOME/config.toml when there is none
    for name, table in found.items():
        write_superlink_connection(parse_superlink_connection(table, name))
    set_default_superlink_connection(default)
    path = get_flwr_home() / "config.toml"
    print(f"{path}: SuperLink connections {', '.join(found)} (default {default}); "
          f"local-deployment: {deployment['address']}, {'TLS' if 'root-certificates' in deployment else 'insecure'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
