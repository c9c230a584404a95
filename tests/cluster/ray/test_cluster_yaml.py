"""cluster.yaml is a valid Ray cluster launcher file and runs what the README says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_cluster_yaml_matches_rays_launcher_schema(config: dict[str, Any]) -> None:
    import ray

    schema_path = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
    schema = json.loads(schema_path.read_text())
    jsonschema.validate(config, schema)
    assert config["head_node_type"] in config["available_node_types"]
    for node_type in config["available_node_types"].values():
        assert {"resources", "node_config"} <= set(node_type)


def test_every_host_starts_nats_with_auth_and_tls_from_the_wheel(config: dict[str, Any]) -> None:
    head = " ".join(config["head_start_ray_commands"])
    worker = " ".join(config["worker_start_ray_commands"])
    for commands in (head, worker):
        assert re.search(
            r"cd ~/actline/deploy && nohup ~/actline/\.venv/bin/nats-server -c nats\.conf", commands
        )
    assert "--routes nats-route://$RAY_HEAD_IP:6222" in worker
    assert "-n nats-head" in head and "-n nats-$(hostname)" in worker  # a server name each
    assert "ray start --head" in head
    conf = (ROOT / "deploy" / "nats.conf").read_text()
    assert "include ./nats-auth.conf" in conf  # the operator and accounts: auth on
    assert conf.count("ca_file") == 2 and "verify: true" in conf  # client TLS, route mTLS
    assert "deploy/keys" in config["rsync_exclude"]  # the secrets stay home
    setup = " ".join(config["setup_commands"])
    assert "pip install --quiet -e ." in setup
    assert config["file_mounts"] == {"~/actline": "."}


def test_three_hosts_run_a_nats_cluster_and_the_job_gets_every_url(
    config: dict[str, Any],
) -> None:
    """The head and the two hosts of type ``nats`` (a fixed pair: never scaled down) run
    nats-server; the other workers do not; the job is given the three URLs."""
    types = config["available_node_types"]
    nats = types["nats"]
    assert nats["min_workers"] == nats["max_workers"] == 2
    marks = " ".join(nats["worker_setup_commands"])
    assert "touch ~/.actline-nats-host" in marks
    assert "pip install --quiet -e ." in marks  # a type's list replaces setup_commands
    for name, node_type in types.items():
        if name not in ("nats", config["head_node_type"]):
            setup = " ".join(node_type.get("worker_setup_commands", []))
            assert ".actline-nats-host" not in setup, name
    worker = " ".join(config["worker_start_ray_commands"])
    assert "test ! -f ~/.actline-nats-host || {" in worker  # only the marked hosts
    conf = (ROOT / "deploy" / "nats.conf").read_text()
    assert re.search(r"cluster \{\s*name: actline\s*listen: 0\.0\.0\.0:6222", conf)
    assert "jetstream {" in conf and "http_port: 8222" in conf  # /jsz: the meta leader
    header = (ROOT / "cluster.yaml").read_text().split("\ncluster_name:", 1)[0]
    assert "--nats tls://<head>:4222,tls://<nats1>:4222,tls://<nats2>:4222" in header
    assert "3 replicas" in header and "ACTLINE_JS_REPLICAS" in header


def test_the_commented_on_premises_variant_parses(config: dict[str, Any]) -> None:
    text = (ROOT / "cluster.yaml").read_text()
    tail = text.split("# --- On premises", 1)[1].split("\n", 1)[1]
    variant = yaml.safe_load(re.sub(r"^# ?", "", tail, flags=re.M))
    assert variant["provider"]["type"] == "local"
    assert variant["head_node_type"] in variant["available_node_types"]
    hosts = variant["available_node_types"][variant["head_node_type"]]
    assert "touch ~/.actline-nats-host" in hosts["worker_setup_commands"]  # NATS on all three


def test_the_readme_names_the_commands_of_cluster_yaml() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Running on a Ray cluster", 1)[1].split("\n## ", 1)[0]
    for command in (
        "ray up cluster.yaml",
        "ray job submit",
        "python -m actline.actors.cluster.ray_job",
    ):
        assert command in section
    assert "--nats tls://H1:4222,tls://H2:4222,tls://H3:4222" in section  # every server
    assert "ray down cluster.yaml" in section
