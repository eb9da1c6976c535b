"""The live page in a real browser, for tests and the screenshot: headless Chromium driven
by selenium (Debian's `chromium` and `chromium-driver`: `make chromium`).

`read_page` reads what the page shows, from its data attributes, in one script run in the
page: one rendering of it, never half of one redraw and half of the next.

`python -m tidelog.testing.browser --out docs/ui.png` starts a 3-node cluster of its own,
produces, commits a consumer group's offsets, kills one node (SIGKILL, by the PID its
cluster recorded), produces more and saves a picture of the page (`make ui-screenshot`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, Final

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM: Final = "/usr/bin/chromium"
CHROMEDRIVER: Final = "/usr/bin/chromedriver"
PAGE_LOAD_TIMEOUT_S: Final = 30
WINDOW: Final = (1280, 900)

# What the page shows: nodes, and each partition's HWM, leader, replicas and groups.
_READ_PAGE_JS: Final = """
const read = (el, name) => el.getAttribute(name);
const page = {connection: document.getElementById("connection").dataset.state,
              nodes: {}, partitions: []};
for (const node of document.querySelectorAll("#nodes .node")) {
  page.nodes[read(node, "data-node")] = {state: read(node, "data-state"),
                                          text: node.textContent};
}
for (const section of document.querySelectorAll("section.partition")) {
  const hwmText = section.querySelector(".hwm").textContent;
  page.partitions.push({
    topic: read(section, "data-topic"), partition: Number(read(section, "data-partition")),
    hwm: Number(read(section, "data-hwm")), hwm_text: hwmText,
    leader: read(section, "data-leader"), epoch: read(section, "data-epoch"),
    isr: read(section, "data-isr"),
    replicas: [...section.querySelectorAll(".replica")].map((r) => ({
      node: Number(read(r, "data-node")), state: read(r, "data-state"),
      log_end_offset: read(r, "data-log-end-offset"), role: read(r, "data-role")})),
    groups: [...section.querySelectorAll(".group")].map((g) => ({
      group: read(g, "data-group"), committed: Number(read(g, "data-committed")),
      lag: Number(read(g, "data-lag")), text: g.textContent})),
  });
}
return JSON.stringify(page);
"""


def headless_chromium(*, window: tuple[int, int] = WINDOW) -> webdriver.Chrome:
    """A headless Chromium, its window `window` pixels; quit() it when done."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # in a container, as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={window[0]},{window[1]}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
    return driver


def read_page(driver: webdriver.Chrome) -> dict[str, Any]:
    """{"connection": state, "nodes": {id: {"state", "text"}}, "partitions": [...]}."""
    page: dict[str, Any] = json.loads(driver.execute_script(_READ_PAGE_JS))
    return page


def partition_of(page: dict[str, Any], topic: str, partition: int) -> dict[str, Any] | None:
    rows: list[dict[str, Any]] = page["partitions"]
    for row in rows:
        if row["topic"] == topic and row["partition"] == partition:
            return row
    return None


def screenshot(out: Path) -> None:
    """A 3-node cluster of its own, a topic with records and a group's offsets, one node
    killed, and the page saved to `out` (PNG)."""
    from kafka import KafkaConsumer, TopicPartition  # noqa: PLC0415
    from kafka.structs import OffsetAndMetadata  # noqa: PLC0415

    from tidelog.testing.live import (  # noqa: PLC0415 - it imports the Kafka clients
        LiveCluster,
        ProducerLoad,
        create_topic,
        eventually,
    )

    directory = Path(tempfile.mkdtemp(prefix="tidelog-ui-"))
    cluster = LiveCluster(directory / "cluster")
    driver = None
    try:
        create_topic(cluster.bootstrap, "orders", partitions=3)
        for partition, records in enumerate((900, 1200, 700)):
            ProducerLoad(
                cluster.bootstrap, "orders", records=records, partition=partition, rate_per_s=2000
            ).run()
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="billing")
        committed = {
            TopicPartition("orders", p): OffsetAndMetadata(o, "", -1)
            for p, o in enumerate((850, 400, 650))
        }
        consumer.commit(committed)
        consumer.close()
        admin = cluster.record["nodes"][0]["admin"]
        driver = headless_chromium()
        driver.get(f"http://{admin}/")
        victim = cluster.record["nodes"][2]
        os.kill(victim["pid"], signal.SIGKILL)  # a broker of the cluster this started
        for partition in range(3):
            ProducerLoad(
                cluster.bootstrap, "orders", records=300, partition=partition, rate_per_s=2000
            ).run()
        eventually(
            lambda: read_page(driver)["nodes"].get(str(victim["id"]), {}).get("state") == "down",
            "the killed node shown DOWN",
        )
        driver.save_screenshot(str(out))
    finally:
        if driver is not None:
            driver.quit()
        cluster.down()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/ui.png"))
    screenshot(parser.parse_args().out)


if __name__ == "__main__":
    main()
