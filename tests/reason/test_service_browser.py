"""``mirage-kg serve`` for real: the command on a free loopback port over the demo KG with a scripted model, checked
with plain HTTP (the same neighbours as ``query anchor --json``; 401 without the token) and driven in headless
Chromium (Debian's ``chromium`` and ``chromium-driver`` through selenium): search, open an entity, move by
keyboard, find paths, ask and see the chains and the cited paths.

Screenshots of each page go to ``$MIRAGE_KG_SHOTS`` when set (else the test's temporary folder)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from mirage_kg.cli import main

from tests.reason.service_support import QUESTION, ServeProcess, write_script

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")
pytestmark = [pytest.mark.server, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,1300"]
TOKEN = "browser-test-token-1234"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    folder = tmp_path_factory.mktemp("serve")
    process = ServeProcess("--script", str(write_script(folder)), "--embedding-model", "none",
                           log=folder / "serve.log")
    yield process
    process.stop()


def test_anchor_over_http_is_the_cli_json(server: ServeProcess) -> None:
    response = httpx.get(f"{server.url}/v1/anchor", params={"entity": "KG:Asthma"}, timeout=30)
    assert response.status_code == 200
    cli = CliRunner().invoke(main, ["query", "anchor", "KG:Asthma", "--json", "--embedding-model", "none"])
    assert response.json() == json.loads(cli.stdout)
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "access-control-allow-origin" not in response.headers


def test_with_a_token_a_request_without_it_gets_401(tmp_path: Path) -> None:
    process = ServeProcess("--no-ask", "--embedding-model", "none", token=TOKEN, log=tmp_path / "serve.log")
    try:
        bare = httpx.get(f"{process.url}/v1/anchor", params={"entity": "KG:Asthma"}, timeout=30)
        assert bare.status_code == 401 and bare.json()["error"]["type"] == "Unauthorized"
        authorised = httpx.get(f"{process.url}/v1/anchor", params={"entity": "KG:Asthma"}, timeout=30,
                               headers={"Authorization": f"Bearer {TOKEN}"})
        assert authorised.status_code == 200 and authorised.json()["neighbours"]
    finally:
        process.stop()


def _driver(profile: Path):  # type: ignore[no-untyped-def]
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium "
                    "chromium-driver; scripts/test.sh tries)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    try:
        return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    except Exception as exc:  # a Chromium that cannot start here (no display libs, sandbox): skip, saying why
        pytest.skip(f"headless Chromium did not start: {str(exc).splitlines()[0]}")


def test_the_web_app_in_headless_chromium(server: ServeProcess, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("MIRAGE_KG_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    driver = _driver(tmp_path / "profile")
    wait = WebDriverWait(driver, 30)

    def text_in(selector: str, text: str) -> None:
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text))

    def shoot(name: str) -> None:
        shoot_page(driver, shots / f"{name}.png")

    try:
        driver.get(server.url + "/")
        text_in("main", "Explore the knowledge graph")
        text_in("main", "274 entities")
        shoot("1-home")

        # search with autocomplete, keyboard only: type, arrow down, Enter
        box = driver.find_element(By.ID, "search-box")
        box.send_keys("asth")
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#search-box-list li[data-id='KG:Asthma']")))
        box.send_keys(Keys.ENTER)
        text_in("#entity-title", "Asthma")
        nodes = driver.find_elements(By.CSS_SELECTOR, "#entity-graph svg g.node.link")
        api = httpx.get(f"{server.url}/v1/anchor", params={"entity": "KG:Asthma", "k": 4}, timeout=30).json()
        assert len(nodes) == len(api["neighbours"]) > 3  # each group's neighbours (a handful each here)
        assert driver.find_elements(By.CSS_SELECTOR, "#entity-graph svg line[marker-end]")
        assert driver.find_elements(By.CSS_SELECTOR, "#entity-graph svg text.rel")
        assert "cross-references, children, annotations" in driver.find_element(By.ID, "concept-lacks").text
        shoot("2-entity")

        # click to move: focus a neighbour in the graph and press Enter
        neighbour = nodes[0]
        target_id = neighbour.get_attribute("data-id")
        target_label = next(n["label"] for n in api["neighbours"] if n["id"] == target_id)
        driver.execute_script("arguments[0].focus()", neighbour)
        driver.switch_to.active_element.send_keys(Keys.ENTER)
        text_in("#entity-title", target_label)
        assert target_id in driver.current_url.replace("%3A", ":")

        # the path finder: both ends by autocomplete, at most 2 hops
        driver.get(server.url + "/#/paths")
        for field, typed, wanted in (("path-from", "Asthma", "KG:Asthma"), ("path-to", "Wheez", "KG:Wheezing")):
            entry = wait.until(ec.element_to_be_clickable((By.ID, field)))
            entry.send_keys(typed)
            wait.until(ec.visibility_of_element_located(
                (By.CSS_SELECTOR, f"#{field}-list li[data-id='{wanted}']")))
            entry.send_keys(Keys.ENTER)
        driver.find_element(By.CSS_SELECTOR, "#path-hops option[value='2']").click()
        driver.find_element(By.ID, "path-find").click()
        text_in("#path-count", "path(s) of at most 2 edges")
        bridge = httpx.get(f"{server.url}/v1/bridge", params={"source": "KG:Asthma", "target": "KG:Wheezing",
                                                              "max_hops": 2, "max_paths": 200}, timeout=30).json()
        rows = driver.find_elements(By.CSS_SELECTOR, "#path-results svg g.path-row")
        assert len(rows) == len(bridge["paths"]) >= 1
        assert driver.find_element(By.ID, "path-count").text.startswith(f"{len(bridge['paths'])} path(s)")
        assert len(driver.find_elements(By.CSS_SELECTOR, ".path-list li")) == len(bridge["paths"])
        shoot("3-paths")

        # ask: sub-questions and chains appear, then the answer; a claim highlights its cited paths
        driver.get(server.url + "/#/ask")
        question = wait.until(ec.element_to_be_clickable((By.ID, "ask-question")))
        question.send_keys(QUESTION)
        driver.find_element(By.ID, "ask-go").click()
        text_in("#ask-status", "Done.")
        subs = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#ask-subquestions li")]
        assert subs == ["What medication treats asthma?", "What causes a cough?"]
        chains = driver.find_elements(By.CSS_SELECTOR, "#ask-chains .chain")
        assert len(chains) == 2
        for chain in chains:
            assert chain.find_elements(By.CSS_SELECTOR, ".search-result li"), chain.text
            assert "Chain answer:" in chain.text
        assert "Salbutamol" in driver.find_element(By.ID, "ask-answer-text").text
        buttons = driver.find_elements(By.CSS_SELECTOR, "#ask-claims .claim-button")
        assert buttons
        assert not driver.find_elements(By.CSS_SELECTOR, "#ask-graph g.path-row.hl")
        buttons[0].click()
        highlighted = driver.find_elements(By.CSS_SELECTOR, "#ask-graph g.path-row.hl")
        assert highlighted and buttons[0].get_attribute("aria-pressed") == "true"
        assert driver.find_elements(By.CSS_SELECTOR, "#ask-graph g.path-row.dim") or \
            len(highlighted) == len(driver.find_elements(By.CSS_SELECTOR, "#ask-graph g.path-row"))
        shoot("4-ask")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == [], errors
    except Exception:
        driver.save_screenshot(str(shots / "failure.png"))
        raise
    finally:
        driver.quit()


#: a scripted model whose chains disagree (influenza for the fever, pneumonia for the cough) and whose writer adds a
#: sentence no claim supports: the answer has a verdict, flags, a conflict, a dropped claim, a chain not kept and the
#: model's own words apart; the single-chain pipeline (which does not check its wording) shows a marked sentence
HONESTY_QUESTION = "I have a fever and a cough. What is it?"
HONESTY_SCRIPT = {
    "Write at most": "1. What causes a fever?\n2. What causes a cough?",
    "Facts:\n[1]": "Pneumonia matches your fever and cough [1]. It spreads quickly in winter. Please see a doctor.",
    "What causes a fever": "Influenza, most likely.",
    "What causes a cough": "Pneumonia, I think.",
    "": "Pneumonia, most likely. It spreads quickly in winter.",
}


def _serve(folder: Path, *args: str) -> ServeProcess:
    script = folder / "honesty.json"
    script.write_text(json.dumps(HONESTY_SCRIPT), encoding="utf-8")
    return ServeProcess("--script", str(script), "--embedding-model", "none", *args, log=folder / "serve.log")


def test_the_web_app_shows_how_grounded_an_answer_is(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("MIRAGE_KG_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    driver = _driver(tmp_path / "profile")
    wait = WebDriverWait(driver, 30)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mirage, single = _serve(tmp_path / "a"), _serve(tmp_path / "b", "--pipeline", "single-chain")

    def ask(server: ServeProcess) -> dict:  # type: ignore[type-arg]
        driver.get(server.url + "/#/ask")
        box = wait.until(ec.element_to_be_clickable((By.ID, "ask-question")))
        box.send_keys(HONESTY_QUESTION)
        driver.find_element(By.ID, "ask-go").click()
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#ask-status"), "Done."))
        return httpx.post(f"{server.url}/v1/ask", json={"question": HONESTY_QUESTION}, timeout=60).json()

    def shoot(name: str) -> None:
        shoot_page(driver, shots / f"{name}.png")

    try:
        record = ask(mirage)
        assert record["support"]["verdict"] == "partial" and record["unsupported_text"] and record["conflicts"]
        # the verdict comes first, before the answer, and says what the record says
        verdict = driver.find_element(By.ID, "ask-verdict")
        assert verdict.get_attribute("data-verdict") == "partial" and record["support"]["reason"] in verdict.text
        answer = driver.find_element(By.ID, "ask-answer-text")
        assert verdict.location["y"] < answer.location["y"]
        assert "It spreads quickly in winter" not in answer.text  # never as the graph's answer ...
        own = driver.find_element(By.ID, "ask-unsupported")  # ... only under its label
        assert "NOT supported by the knowledge graph" in own.text and "It spreads quickly in winter." in own.text
        flags = driver.find_elements(By.CSS_SELECTOR, "#ask-flags li")
        assert [f.get_attribute("data-code") for f in flags] == [f["code"] for f in record["flags"]]
        assert "unsupported_text" in [f.get_attribute("data-code") for f in flags]
        conflicts = driver.find_elements(By.CSS_SELECTOR, "#ask-conflicts li")
        assert len(conflicts) == len(record["conflicts"]) and "diagnosis" in conflicts[0].text
        dropped = driver.find_elements(By.CSS_SELECTOR, "#ask-dropped li")
        assert [d.get_attribute("data-status") for d in dropped] == [c["status"] for c in record["dropped_claims"]]
        assert "Influenza" in dropped[0].text
        # the chain whose answer the synthesizer did not keep says so
        cards = driver.find_elements(By.CSS_SELECTOR, "#ask-chains .chain")
        not_kept = [i for i, c in enumerate(record["chains"]) if not c["kept"]]
        assert not_kept and all("Not kept" in cards[i].text for i in not_kept)
        assert "Dropped from this chain: Influenza (outvoted)" in cards[not_kept[0]].text
        assert all("Not kept" not in cards[i].text for i in range(len(cards)) if i not in not_kept)
        shoot("5-ask-verdict")

        # a pipeline that does not check its wording: its unsupported sentence is marked in the answer
        record = ask(single)
        unsupported = [s["text"] for s in record["sentences"] if not s["supported"]]
        assert unsupported and record["support"]["verdict"] in ("partial", "unsupported")
        marked = driver.find_elements(By.CSS_SELECTOR, "#ask-answer-text .sentence.unsupported")
        assert [m.text for m in marked] == unsupported
        assert all("Not supported by the knowledge graph" in m.get_attribute("title") for m in marked)
        shoot("6-ask-marked")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == [], errors
    except Exception:
        driver.save_screenshot(str(shots / "failure-honesty.png"))
        raise
    finally:
        driver.quit()
        mirage.stop()
        single.stop()


#: every pair of text boxes drawn in the neighbourhood picture that overlap (none should)
OVERLAPS_JS = """
const boxes = [...document.querySelectorAll('#entity-graph svg text')].map((t) => {
  const b = t.getBoundingClientRect(); return [t.textContent, b.left, b.top, b.right, b.bottom]; });
const hits = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const a = boxes[i], b = boxes[j];
  if (a[1] < b[3] - 0.5 && b[1] < a[3] - 0.5 && a[2] < b[4] - 0.5 && b[2] < a[4] - 0.5) hits.push([a[0], b[0]]);
}
return [boxes.length, hits];
"""


def test_the_concept_page_shows_each_section_pages_and_counts_facts_once(tmp_path: Path) -> None:
    """On a small default KG in the real formats: the definition, synonyms, cross-references, parents, annotations
    with frequencies and references of a merged disease; paged children and facts of a phenotype with 60 children;
    one fact count everywhere; a neighbourhood picture whose labels do not overlap."""
    import re

    pytest.importorskip("zstandard", reason="the [sources] extra is not installed: pip install 'mirage-kg[sources]'")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.kg.concept_support import MANY_CHILDREN, MANY_CHILDREN_PARENT, build_concept_store

    shots = Path(os.environ.get("MIRAGE_KG_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    store = build_concept_store(tmp_path)
    driver = _driver(tmp_path / "profile")
    process = ServeProcess("--store", str(store), "--no-ask", "--embedding-model", "none", log=tmp_path / "serve.log")
    wait = WebDriverWait(driver, 30)

    def text_in(selector: str, text: str) -> None:
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text))

    def record(entity: str) -> dict:  # type: ignore[type-arg]
        return httpx.get(f"{process.url}/v1/concept", params={"id": entity}, timeout=30).json()

    def one_fact_count(facts: int) -> None:
        assert driver.find_element(By.ID, "fact-count").get_attribute("data-count") == str(facts)
        said = {int(n.replace(",", "")) for n in re.findall(r"([\d,]+) facts", driver.find_element(By.ID, "main").text)}
        assert said == {facts}, said  # no second, different "N facts" anywhere on the page
        assert re.search(rf"of {facts:,}$", driver.find_element(By.CSS_SELECTOR, "#facts-pager .range").text)

    def no_overlaps() -> None:
        drawn, hits = driver.execute_script(OVERLAPS_JS)
        assert drawn > 2 and hits == [], hits

    try:
        marfan = record("MONDO:0007947")
        driver.get(process.url + "/#/entity/MONDO:0007947")
        text_in("#entity-title", "Marfan syndrome")
        text_in("#facts-pager", "of")
        assert driver.find_element(By.ID, "concept-definition").text.endswith(marfan["definitions"][0]["text"] +
                                                                               " (MONDO:0007947)")
        synonyms = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#concept-synonyms li")]
        assert synonyms == [s["text"] for s in marfan["synonyms"]] == ["Marfan's syndrome", "MFS"]
        xrefs = driver.find_elements(By.CSS_SELECTOR, "#concept-xrefs li a")
        assert {x.text for x in xrefs} == {"OMIM:154700", "ORPHA:558"}  # in the KG: links
        assert "disease" in driver.find_element(By.ID, "concept-parents").text
        assert "OMIM:154700" in driver.find_element(By.ID, "concept-same-as").text
        rows = driver.find_elements(By.CSS_SELECTOR, "#concept-annotations-table tbody tr")
        assert len(rows) == marfan["annotations"]["total"] == 13
        assert "Very frequent (80-99%)" in rows[0].text and "ORPHA:558" in rows[0].text
        assert any("45/58 (78%)" in r.text and "Aortic root aneurysm" in r.text for r in rows)
        assert "children" in driver.find_element(By.ID, "concept-lacks").text
        one_fact_count(marfan["facts"])
        no_overlaps()
        shoot_page(driver, shots / "7-concept-marfan.png")

        # many children and facts: paged, the count the same on every page
        parent = record(MANY_CHILDREN_PARENT)
        driver.get(process.url + f"/#/entity/{MANY_CHILDREN_PARENT}")
        text_in("#entity-title", "Abnormality of the skeletal system")
        text_in("#facts-pager", "of")
        one_fact_count(parent["facts"])
        assert "Children (60)" in driver.find_element(By.ID, "concept-hierarchy").text
        children = lambda: driver.find_elements(By.CSS_SELECTOR, "#concept-children-list li")  # noqa: E731
        assert len(children()) == 20
        more = driver.find_element(By.ID, "concept-children-more")
        while more.is_displayed():
            before = len(children())
            more.click()
            wait.until(lambda d: len(children()) > before)
        assert len(children()) == MANY_CHILDREN
        assert len({c.text for c in children()}) == MANY_CHILDREN
        facts = lambda: driver.find_elements(By.CSS_SELECTOR, "#facts-table tbody tr")  # noqa: E731
        assert len(facts()) == 50
        assert driver.find_element(By.CSS_SELECTOR, "#facts-pager .range").text == f"1\u201350 of {parent['facts']}"
        first_page = {r.text for r in facts()}
        driver.find_element(By.CSS_SELECTOR, "#facts-pager .next").click()
        text_in("#facts-pager .range", f"51\u2013{parent['facts']} of {parent['facts']}")
        assert len(facts()) == parent["facts"] - 50 and not first_page & {r.text for r in facts()}
        assert not driver.find_element(By.CSS_SELECTOR, "#facts-pager .next").is_enabled()
        one_fact_count(parent["facts"])
        # the picture groups the 60 children: a handful drawn, the rest one click away in the table
        group = driver.find_element(By.CSS_SELECTOR, "#entity-graph g.rel-group[data-direction='backward']")
        assert len(group.find_elements(By.CSS_SELECTOR, "g.node.link")) == 3
        assert f"({MANY_CHILDREN})" in group.find_element(By.CSS_SELECTOR, "text.rel").text
        group.find_element(By.CSS_SELECTOR, "text.more").click()
        text_in("#facts-pager .range", f"1\u201350 of {MANY_CHILDREN}")
        assert all("\u2190 in" in r.text for r in facts())
        no_overlaps()
        shoot_page(driver, shots / "8-concept-many-children.png")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == [], errors
    except Exception:
        driver.save_screenshot(str(shots / "failure-concept.png"))
        raise
    finally:
        driver.quit()
        process.stop()


def shoot_page(driver, path: Path) -> None:  # type: ignore[no-untyped-def]
    """A screenshot of the whole page (the window stretched to its height)."""
    height = driver.execute_script("return Math.max(document.body.scrollHeight, 900)")
    driver.set_window_size(1280, min(int(height) + 40, 6000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1280, 1300)
