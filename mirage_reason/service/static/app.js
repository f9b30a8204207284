// MIRAGE-KG web app: plain JavaScript and SVG, no libraries, no network beyond this server's /v1/ API.
// Views (hash routes): #/ (home), #/entity/<id>, #/paths?from=&to=&hops=, #/ask
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#1f5fbf", "#c25400", "#2e8540", "#8e44ad", "#b8860b", "#c0392b", "#16808a", "#6d4c41",
  "#5b6475", "#d6336c"];
const LABELS = { entities: {}, relations: {} };

// -- small helpers ------------------------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

function colour(key) {
  let h = 0;
  for (const ch of key) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return PALETTE[h % PALETTE.length];
}

function short(text, limit = 26) {
  return text.length <= limit ? text : text.slice(0, limit - 1) + "\u2026";
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, params = {}, options = {}) {
  const url = new URL(path, location.origin);
  for (const [key, value] of Object.entries(params)) {
    for (const v of [].concat(value)) if (v !== null && v !== undefined && v !== "") url.searchParams.append(key, v);
  }
  const response = await fetch(url, { credentials: "same-origin", ...options });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function errorBox(error) {
  const box = el("p", { class: "error", role: "alert" }, error.message || String(error));
  const candidates = error.body && error.body.error && error.body.error.candidates;
  if (candidates) {
    box.append(" ", ...candidates.map((c) => el("a", { href: entityHref(c.id) }, `${c.label} (${c.id}) `)));
  }
  return box;
}

function entityHref(id) {
  return "#/entity/" + encodeURIComponent(id);
}

function label(id) {
  return LABELS.entities[id] || id;
}

function relationLabel(id) {
  return (LABELS.relations[id] && LABELS.relations[id].label) || id;
}

async function ensureLabels(paths) {
  const ids = new Set(), rels = new Set();
  for (const path of paths) {
    for (const node of path.nodes) if (!(node in LABELS.entities)) ids.add(node);
    for (const step of path.steps) if (!(step.relation in LABELS.relations)) rels.add(step.relation);
  }
  const idList = [...ids], relList = [...rels];
  for (let i = 0; i < Math.max(idList.length, relList.length); i += 400) {
    const got = await api("/v1/labels", { id: idList.slice(i, i + 400), relation: relList.slice(i, i + 400) });
    Object.assign(LABELS.entities, got.entities);
    Object.assign(LABELS.relations, got.relations);
  }
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

// -- autocomplete -------------------------------------------------------------------------------------------------

// A combobox over /v1/search: type, move with the arrow keys, Enter picks, Escape closes.
function autocomplete(input, list, onPick) {
  let items = [], active = -1, timer = null, generation = 0;
  const close = () => { list.hidden = true; input.setAttribute("aria-expanded", "false"); active = -1; };
  const mark = () => {
    [...list.children].forEach((li, i) => li.setAttribute("aria-selected", i === active ? "true" : "false"));
    if (active >= 0) input.setAttribute("aria-activedescendant", list.children[active].id);
    else input.removeAttribute("aria-activedescendant");
  };
  const pick = (item) => { close(); input.value = item.label; input.dataset.id = item.id; onPick(item); };
  const show = (matches) => {
    items = matches;
    list.replaceChildren(...matches.map((m, i) => el("li", {
      id: `${list.id}-${i}`, role: "option", "data-id": m.id,
      onmousedown: (event) => { event.preventDefault(); pick(m); },
    }, m.synonym ? `${m.matched} \u2192 ${m.label}` : m.label, el("span", { class: "id" }, m.id))));
    active = matches.length ? 0 : -1;
    list.hidden = !matches.length;
    input.setAttribute("aria-expanded", matches.length ? "true" : "false");
    mark();
  };
  input.addEventListener("input", () => {
    delete input.dataset.id;
    clearTimeout(timer);
    const query = input.value.trim();
    if (!query) { close(); return; }
    timer = setTimeout(async () => {
      const mine = ++generation;
      try {
        const found = await api("/v1/search", { q: query, limit: 10 });
        if (mine === generation) show(found.matches);
      } catch (error) { close(); }
    }, 120);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown" && items.length) {
      event.preventDefault(); list.hidden = false; active = (active + 1) % items.length; mark();
    } else if (event.key === "ArrowUp" && items.length) {
      event.preventDefault(); active = (active - 1 + items.length) % items.length; mark();
    } else if (event.key === "Enter") {
      if (!list.hidden && active >= 0) { event.preventDefault(); pick(items[active]); }
    } else if (event.key === "Escape") close();
  });
  input.addEventListener("blur", () => setTimeout(close, 150));
}

// -- drawing ------------------------------------------------------------------------------------------------------

function arrowDefs(colours) {
  return svg("defs", {}, [...colours].map((c) => svg("marker", {
    id: "m" + c.slice(1), viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7",
    orient: "auto-start-reverse",
  }, svg("path", { d: "M0,0 L10,5 L0,10 z", fill: c }))));
}

function nodeBox(x, y, id, text, { center = false, link = true } = {}) {
  const width = boxWidth(text);
  const title = svg("title");
  title.textContent = `${text} (${id})`;
  const caption = svg("text", { x, y: y + 4, "text-anchor": "middle" });
  caption.textContent = short(text);
  const group = svg("g", { class: "node" + (center ? " center" : "") + (link ? " link" : ""), "data-id": id },
    title, svg("rect", { x: x - width / 2, y: y - 13, width, height: 26, rx: 6 }), caption);
  if (link) {
    group.setAttribute("tabindex", "0");
    group.setAttribute("role", "link");
    group.setAttribute("aria-label", `${text} (${id})`);
    group.addEventListener("click", () => go(entityHref(id)));
    group.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); go(entityHref(id)); }
    });
  }
  return group;
}

function edge(x1, y1, x2, y2, c, text, fact) {
  const line = svg("line", { class: "edge", x1, y1, x2, y2, stroke: c, "marker-end": `url(#m${c.slice(1)})` });
  const title = svg("title");
  title.textContent = fact;
  line.append(title);
  const caption = svg("text", { class: "rel", x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 5, "text-anchor": "middle" });
  caption.textContent = short(text, 24);
  return [line, caption];
}

// The concept in the middle; its facts grouped by relation and direction, one box per group: facts into the
// concept on the left, facts out of it on the right, boxes stacked so that no label meets another. A group shows
// its neighbours while they are a handful (SHOWN_PER_GROUP), else the best-ranked few and "+N more", which
// filters the facts table to that group. One arrow per group, in the stored direction.
const SHOWN_PER_GROUP = 4;
const GROUP_WIDTH = 250, ROW = 30, HEADER = 26, GAP = 14;

function drawNeighbourhood(center, groups, onMore) {
  const sides = { backward: [], forward: [] };
  for (const g of groups) sides[g.direction === "forward" ? "forward" : "backward"].push(g);
  const heightOf = (g) => HEADER + ROW * (g.shown.length + (g.count > g.shown.length ? 1 : 0)) + 8;
  const stack = (list) => list.reduce((sum, g) => sum + heightOf(g) + GAP, 0);
  const height = Math.max(stack(sides.backward), stack(sides.forward), 120) + 30;
  const leftX = 20, centreX = 20 + GROUP_WIDTH + 130, rightX = centreX + 130 + 100;
  const width = rightX + GROUP_WIDTH + 20, cy = height / 2;
  const centreHalf = boxWidth(center.label) / 2;
  const colours = new Set(), parts = [];
  for (const [side, list] of Object.entries(sides)) {
    let y = (height - stack(list) + GAP) / 2;
    for (const g of list) {
      const h = heightOf(g), x = side === "forward" ? rightX : leftX, c = colour(g.relation);
      colours.add(c);
      const gy = y + h / 2;
      const [a, b] = side === "forward"
        ? [[centreX + centreHalf + 4, cy], [x - 4, gy]] : [[x + GROUP_WIDTH + 4, gy], [centreX - centreHalf - 4, cy]];
      const line = svg("line", { class: "edge", x1: a[0], y1: a[1], x2: b[0], y2: b[1], stroke: c,
        "marker-end": `url(#m${c.slice(1)})` });
      const title = svg("title");
      title.textContent = `${g.count} fact(s): ${side === "forward" ? center.label + " " + g.label + " \u2026"
        : "\u2026 " + g.label + " " + center.label}`;
      line.append(title);
      const caption = svg("text", { class: "rel", x: x + 10, y: y + 17, fill: c });
      caption.textContent = `${short(g.label, 28)} ${side === "forward" ? "\u2192" : "\u2190"} (${g.count})`;
      const box = svg("rect", { class: "group", x, y, width: GROUP_WIDTH, height: h, rx: 6, stroke: c });
      const members = g.shown.map((nb, i) => nodeBox(x + GROUP_WIDTH / 2, y + HEADER + ROW * i + 15, nb.id, nb.label));
      const more = [];
      if (g.count > g.shown.length) {
        const t = svg("text", { class: "more", x: x + GROUP_WIDTH / 2, y: y + HEADER + ROW * g.shown.length + 17,
          "text-anchor": "middle", tabindex: "0", role: "button",
          onclick: () => onMore(g), onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onMore(g); } } });
        t.textContent = `+${g.count - g.shown.length} more: list them`;
        more.push(t);
      }
      parts.push(svg("g", { class: "rel-group", "data-relation": g.relation, "data-direction": g.direction },
        line, box, caption, ...members, ...more));
      y += h + GAP;
    }
  }
  parts.push(nodeBox(centreX, cy, center.id, center.label, { center: true, link: false }));
  return svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `Neighbourhood of ${center.label}: ${groups.length} relation group(s)` }, arrowDefs(colours), ...parts);
}

// One row per path, left to right; arrows follow each fact's stored direction. rowAttrs(i) tags row i.
function boxWidth(text) {
  return 16 + 7.2 * short(text).length;  // 12px system-ui: digits and capitals run wider than 6.8px
}

function drawPaths(paths, rowAttrs = () => ({})) {
  const top = 34, rowHeight = 66;
  const widest = Math.max(60, ...paths.flatMap((p) => p.nodes.map((id) => boxWidth(label(id)))));
  const gap = widest + 150;
  const longest = Math.max(1, ...paths.map((p) => p.steps.length));
  const width = widest + 40 + gap * longest, height = top + rowHeight * Math.max(paths.length, 1);
  const colours = new Set(), rows = [];
  const centre = (i) => 20 + widest / 2 + gap * i;
  paths.forEach((path, r) => {
    const y = top + r * rowHeight;
    const edges = [], nodes = [];
    path.steps.forEach((step, i) => {
      const left = centre(i) + boxWidth(label(path.nodes[i])) / 2 + 4;
      const right = centre(i + 1) - boxWidth(label(path.nodes[i + 1])) / 2 - 4;
      const c = colour(step.relation);
      colours.add(c);
      const [a, b] = step.direction === "forward" ? [left, right] : [right, left];
      edges.push(...edge(a, y, b, y, c, relationLabel(step.relation), path.text));
    });
    path.nodes.forEach((id, i) => {
      nodes.push(nodeBox(centre(i), y, id, label(id), { center: i === 0 || i === path.nodes.length - 1 }));
    });
    const title = svg("title");
    title.textContent = path.text;
    rows.push(svg("g", { class: "path-row", "data-index": r, ...rowAttrs(r) }, title, ...edges, ...nodes));
  });
  return svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `${paths.length} path(s)` }, arrowDefs(colours), ...rows);
}

// -- views --------------------------------------------------------------------------------------------------------

const main = () => document.getElementById("main");

function setView(name, ...children) {
  document.querySelectorAll("nav a").forEach((a) => {
    if (a.dataset.nav === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  });
  main().replaceChildren(...children);
}

async function homeView() {
  const stats = el("div", {}, el("p", { class: "muted" }, "Counting…"));
  setView("home",
    el("h1", {}, "Explore the knowledge graph"),
    el("p", {}, "Type a concept in the search box above, pick it, and walk its neighbourhood; find how two concepts ",
      "connect under ", el("a", { href: "#/paths" }, "Paths"), "; or ", el("a", { href: "#/ask" }, "ask a question"),
      " and watch MIRAGE decompose it, search the graph in parallel chains and cite the paths behind its answer."),
    stats);
  try {
    const s = await api("/v1/stats");
    if (s.status === "running") { stats.replaceChildren(el("p", { class: "muted" }, "Statistics are being computed.")); return; }
    stats.replaceChildren(el("h2", {}, "This graph"),
      el("p", {}, `${s.entities.toLocaleString()} entities, ${s.facts.toLocaleString()} facts, `,
        `${s.relations.length} relations, ${s.graphs.length} graphs.`),
      el("table", {}, el("tr", {}, el("th", {}, "relation"), el("th", {}, "facts")),
        s.relations.slice(0, 12).map((r) => el("tr", {}, el("td", {}, r.label), el("td", {}, r.count.toLocaleString())))));
  } catch (error) { stats.replaceChildren(errorBox(error)); }
}

const FACTS_PER_PAGE = 50, LIST_PAGE = 20;

function pager(id, { total, offset, size }, onPage) {
  const last = Math.min(offset + size, total);
  return el("div", { class: "pager", id },
    el("button", { type: "button", class: "secondary prev", disabled: offset <= 0,
      onclick: () => onPage(Math.max(0, offset - size)) }, "\u2190 Previous"),
    el("span", { class: "range" }, total ? `${offset + 1}\u2013${last} of ${total.toLocaleString()}` : "none"),
    el("button", { type: "button", class: "secondary next", disabled: last >= total,
      onclick: () => onPage(offset + size) }, "Next \u2192"));
}

function entityLinks(list) {
  return list.flatMap((e, i) => [i ? ", " : "", el("a", { href: entityHref(e.id) }, e.label), " ",
    el("span", { class: "id" }, e.id)]);
}

function section(id, title, ...body) {
  return el("section", { id, class: "concept-section" }, el("h2", {}, title), ...body);
}

// The children, LIST_PAGE at a time ("Show more" appends the next page).
function childrenSection(id, children) {
  const list = el("ul", { class: "plain", id: "concept-children-list" });
  const more = el("button", { type: "button", class: "secondary", id: "concept-children-more" }, "Show more");
  let shown = 0;
  const add = (page) => {
    list.append(...page.items.map((c) => el("li", {}, el("a", { href: entityHref(c.id) }, c.label), " ",
      el("span", { class: "id" }, c.id))));
    shown += page.items.length;
    more.hidden = shown >= page.total;
    more.textContent = `Show more (${(page.total - shown).toLocaleString()} left)`;
  };
  more.addEventListener("click", async () => {
    try { add(await api("/v1/concept/children", { id, offset: shown, limit: LIST_PAGE })); } catch (e) { list.after(errorBox(e)); }
  });
  add(children);
  return [list, more];
}

// Each annotated edge seen from the concept: the other end, and the relation read from here ("(of)" when the
// concept is the edge's object, e.g. a feature annotated to a disease).
function annotationRows(page, members) {
  return page.items.map((a) => {
    const here = members.has(a.subject.id);
    const other = here ? a.object : a.subject;
    return el("tr", { class: a.negated ? "negated" : null },
      el("td", {}, el("a", { href: entityHref(other.id) }, other.label), " ", el("span", { class: "id" }, other.id)),
      el("td", {}, (a.negated ? "NOT " : "") + (here ? a.relation_label : a.inverse_label)),
      el("td", { class: "frequency" }, a.frequency_label || "not given"),
      el("td", {}, [a.evidence, a.onset && `onset ${a.onset}`, a.sex && `sex ${a.sex}`, ...a.modifiers]
        .filter(Boolean).join("; ")),
      el("td", { class: "refs" }, a.references.join(", ")));
  });
}

function annotationsSection(record) {
  const id = record.entity.id;
  const members = new Set([id, ...record.same_as.map((e) => e.id)]);
  const body = el("tbody", {});
  const table = el("table", { id: "concept-annotations-table", "aria-label": "Annotations" },
    el("thead", {}, el("tr", {}, ["annotated with", "relation", "frequency", "evidence and qualifiers", "references"]
      .map((h) => el("th", {}, h)))), body);
  const holder = el("div", {});
  const show = (page) => {
    body.replaceChildren(...annotationRows(page, members));
    holder.replaceChildren(pager("concept-annotations-pager", { total: page.total, offset: page.offset, size: LIST_PAGE },
      async (offset) => { try { show(await api("/v1/concept/annotations", { id, offset, limit: LIST_PAGE })); } catch (e) { holder.append(errorBox(e)); } }));
  };
  show(record.annotations);
  return section("concept-annotations", `Annotations (${record.annotations.total.toLocaleString()})`,
    el("p", { class: "muted" }, "What the source says of each annotated edge: how often the feature occurs in the ",
      "disease, the evidence code, onset and the publications or records it rests on."), table, holder);
}

// The facts, FACTS_PER_PAGE at a time, of one relation group or all; the count is the record's one fact count.
function factsSection(record) {
  const id = record.entity.id;
  const choose = el("select", { id: "facts-relation", "aria-label": "Relation" },
    el("option", { value: "" }, `all relations (${record.facts.toLocaleString()})`),
    record.relations.map((r) => el("option", { value: `${r.relation}|${r.direction}` },
      `${r.label} ${r.direction === "forward" ? "\u2192" : "\u2190"} (${r.count.toLocaleString()})`)));
  const body = el("tbody", {});
  const table = el("table", { "aria-label": "Facts", id: "facts-table" },
    el("thead", {}, el("tr", {}, ["relation", "direction", "neighbour", "fact"].map((h) => el("th", {}, h)))), body);
  const holder = el("div", {});
  const load = async (offset) => {
    const [relation, direction] = choose.value ? choose.value.split("|") : [null, "both"];
    try {
      const page = await api("/v1/concept/facts", { id, relation, direction, offset, limit: FACTS_PER_PAGE });
      body.replaceChildren(...page.neighbours.map((nb) => el("tr", {},
        el("td", {}, nb.relation_label), el("td", {}, nb.direction === "forward" ? "\u2192 out" : "\u2190 in"),
        el("td", {}, el("a", { href: entityHref(nb.id) }, nb.label)), el("td", {}, nb.text))));
      holder.replaceChildren(pager("facts-pager", { total: page.matching, offset: page.offset, size: FACTS_PER_PAGE }, load));
    } catch (error) { holder.replaceChildren(errorBox(error)); }
  };
  choose.addEventListener("change", () => load(0));
  const node = section("concept-facts", "Facts", el("div", { class: "row" },
    el("label", { for: "facts-relation" }, "Show", choose)), table, holder);
  node.show = (relation, direction) => { choose.value = relation ? `${relation}|${direction}` : ""; load(0); };
  load(0);
  return node;
}

async function entityView(id) {
  setView("home", el("p", { class: "muted" }, `Loading ${id}…`));
  try {
    const [record, hood] = await Promise.all([api("/v1/concept", { id, limit: LIST_PAGE }),
      api("/v1/anchor", { entity: id, k: SHOWN_PER_GROUP })]);
    const centre = record.entity;
    LABELS.entities[centre.id] = centre.label;
    for (const nb of hood.neighbours) LABELS.entities[nb.id] = nb.label;
    document.title = `${centre.label} \u2013 MIRAGE-KG`;
    const facts = factsSection(record);
    const groups = record.relations.map((r) => {
      const mine = hood.neighbours.filter((nb) => nb.relation === r.relation && nb.direction === r.direction);
      return { ...r, shown: r.count <= SHOWN_PER_GROUP ? mine : mine.slice(0, SHOWN_PER_GROUP - 1) };
    });
    const more = (g) => { facts.show(g.relation, g.direction); facts.scrollIntoView(); };
    const parts = [
      el("h1", { id: "entity-title" }, centre.label),
      el("p", { class: "muted", id: "entity-meta" }, `${centre.id}`,
        record.types.length ? ` \u00b7 ${record.types.map((t) => t.label).join(", ")}` : "", " \u00b7 ",
        el("strong", { id: "fact-count", "data-count": record.facts }, `${record.facts.toLocaleString()} facts`),
        " \u00b7 ", el("a", { href: `#/paths?from=${encodeURIComponent(centre.id)}` }, "find paths from here")),
    ];
    if (record.same_as.length) {
      parts.push(el("p", { id: "concept-same-as" }, "The same concept in other sources: ", ...entityLinks(record.same_as)));
    }
    if (record.definitions.length) {
      parts.push(section("concept-definition", "Definition", record.definitions.map((d) =>
        el("p", { class: "definition", lang: d.lang || null }, d.text,
          record.same_as.length ? el("span", { class: "id" }, ` (${d.source})`) : null))));
    }
    if (record.synonyms.length) {
      parts.push(section("concept-synonyms", `Synonyms (${record.synonyms.length})`,
        el("ul", { class: "chips" }, record.synonyms.map((s) => el("li", { lang: s.lang || null }, s.text)))));
    }
    if (record.xrefs.length) {
      parts.push(section("concept-xrefs", `Cross-references (${record.xrefs.length})`,
        el("ul", { class: "chips" }, record.xrefs.map((x) => el("li", { "data-kind": x.kind },
          x.in_kg ? el("a", { href: entityHref(x.id) }, x.id) : x.id,
          x.label ? el("span", { class: "muted" }, ` ${x.label}`) : null,
          x.kind !== "exact" ? el("span", { class: "muted" }, ` (${x.kind === "db" ? "xref" : x.kind + " match"})`) : null)))));
    }
    if (record.parents.length || record.children.total) {
      parts.push(section("concept-hierarchy", "Is a",
        el("p", { id: "concept-parents" }, el("strong", {}, "Parents: "),
          record.parents.length ? entityLinks(record.parents) : "none (a top concept)"),
        el("p", {}, el("strong", {}, `Children (${record.children.total.toLocaleString()}):`),
          record.children.total ? "" : " none"),
        ...(record.children.total ? childrenSection(centre.id, record.children) : [])));
    }
    if (record.annotations.total) parts.push(annotationsSection(record));
    if (record.lacks.length) {
      parts.push(el("p", { class: "lacks", id: "concept-lacks" }, "Not given by the sources of this graph for ",
        `${centre.label}: ${record.lacks.join(", ")}.`));
    }
    parts.push(section("concept-neighbourhood", "Neighbourhood",
      record.facts ? el("div", { class: "graph", id: "entity-graph" }, drawNeighbourhood(centre, groups, more))
        : el("p", {}, "No facts."),
      el("p", { class: "muted" }, `Facts grouped by relation: into ${centre.label} on the left, out of it on the right; `,
        `a group of more than ${SHOWN_PER_GROUP} shows its most specific neighbours. Click a concept, or Tab to it `,
        "and press Enter, to move there."),
      el("p", { class: "muted", id: "concept-sources" }, `Sources: ${record.sources.join(", ")}`)), facts);
    setView("home", ...parts);
    main().focus();
  } catch (error) { setView("home", el("h1", {}, id), errorBox(error)); }
}

function entityField(id, caption, initial) {
  const input = el("input", { id, type: "text", role: "combobox", "aria-autocomplete": "list",
    "aria-controls": `${id}-list`, "aria-expanded": "false", autocomplete: "off", placeholder: "concept name or id" });
  const list = el("ul", { id: `${id}-list`, class: "suggestions", role: "listbox", hidden: true });
  if (initial) { input.value = initial; input.dataset.id = initial; }
  autocomplete(input, list, () => {});
  return [el("label", { for: id }, caption, el("div", { class: "field" }, input, list)), input];
}

async function pathsView(params) {
  const [fromLabel, from] = entityField("path-from", "From", params.get("from"));
  const [toLabel, to] = entityField("path-to", "To", params.get("to"));
  const hops = el("select", { id: "path-hops" }, [1, 2, 3, 4].map((h) => el("option", { value: h }, h)));
  hops.value = params.get("hops") || "3";
  const results = el("div", { id: "path-results", "aria-live": "polite" });
  const form = el("form", { class: "row", onsubmit: (event) => {
    event.preventDefault();
    const a = from.dataset.id || from.value.trim(), b = to.dataset.id || to.value.trim();
    if (!a || !b) { results.replaceChildren(errorBox(new Error("Pick both ends first."))); return; }
    go(`#/paths?from=${encodeURIComponent(a)}&to=${encodeURIComponent(b)}&hops=${hops.value}`);
  } }, fromLabel, toLabel, el("label", { for: "path-hops" }, "At most hops", hops),
  el("button", { type: "submit", id: "path-find" }, "Find paths"));
  setView("paths", el("h1", {}, "How do two concepts connect?"),
    el("p", { class: "muted" }, "Every simple path of at most the given number of edges, walked either way, shortest first."),
    form, results);
  if (!params.get("from") || !params.get("to")) { from.focus(); return; }
  results.replaceChildren(el("p", { class: "muted" }, "Searching…"));
  try {
    const found = await api("/v1/bridge", { source: params.get("from"), target: params.get("to"),
      max_hops: hops.value, max_paths: 200 });
    from.value = found.source.label; to.value = found.target.label;
    from.dataset.id = found.source.id; to.dataset.id = found.target.id;
    LABELS.entities[found.source.id] = found.source.label;
    LABELS.entities[found.target.id] = found.target.label;
    await ensureLabels(found.paths);
    results.replaceChildren(
      el("h2", { id: "path-count" }, `${found.paths.length} path(s) of at most ${hops.value} edges from `,
        `${found.source.label} to ${found.target.label}`),
      found.paths.length ? el("div", { class: "graph" }, drawPaths(found.paths)) : el("p", {}, "No path found."),
      el("ol", { class: "path-list" }, found.paths.map((p) => el("li", {}, p.text))));
  } catch (error) { results.replaceChildren(errorBox(error)); }
}

// The ask page: an EventSource over /v1/ask/stream; sub-questions and chains appear as the events arrive.
let currentAsk = null;

function askView(params) {
  const box = el("textarea", { id: "ask-question", "aria-label": "Your question",
    placeholder: "e.g. I have a cough. What medication treats asthma?" });
  box.value = params.get("q") || "";
  const button = el("button", { type: "submit", id: "ask-go" }, "Ask");
  const live = el("div", { id: "ask-live" });
  const form = el("form", { onsubmit: (event) => { event.preventDefault(); startAsk(box.value.trim(), live, button); } },
    el("label", { for: "ask-question" }, el("h1", {}, "Ask MIRAGE")), box, el("div", { class: "row" }, button));
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); form.requestSubmit(); }
  });
  setView("ask", form, el("p", { class: "muted" }, "Ctrl+Enter asks. Not medical advice."), live);
  box.focus();
}

function startAsk(question, live, button) {
  if (!question) return;
  if (currentAsk) currentAsk.close();
  const status = el("p", { id: "ask-status", role: "status" }, "Sending…");
  const entities = el("p", { id: "ask-entities", class: "muted" });
  const subs = el("ol", { id: "ask-subquestions" });
  const chains = el("div", { class: "cards", id: "ask-chains" });
  const answer = el("div", { id: "ask-answer" });
  live.replaceChildren(status, entities, el("h2", {}, "Sub-questions"), subs, el("h2", {}, "Chains"), chains, answer);
  const cards = {};
  button.disabled = true;
  const source = new EventSource(`/v1/ask/stream?question=${encodeURIComponent(question)}`);
  currentAsk = source;
  const on = (kind, handler) => source.addEventListener(kind, (event) => handler(JSON.parse(event.data)));
  on("queued", (e) => { status.textContent = e.place ? `Waiting in line (place ${e.place})…` : "Starting…"; });
  on("started", () => { status.textContent = "Linking the question to the graph…"; });
  on("entities", (e) => {
    entities.replaceChildren("Linked: ", ...e.entities.flatMap((x, i) =>
      [i ? ", " : "", el("a", { href: entityHref(x.id) }, x.label)]));
    for (const x of e.entities) LABELS.entities[x.id] = x.label;
    status.textContent = "Decomposing…";
  });
  on("sub_questions", (e) => {
    subs.replaceChildren(...e.sub_questions.map((q) => el("li", {}, q)));
    for (const c of e.chains) {
      const list = el("div", { class: "searches" });
      const result = el("p", { class: "chain-answer" });
      const state = el("span", { class: "state" }, "reasoning…");
      cards[c.chain] = { list, result, state };
      chains.append(el("section", { class: "card chain", "data-chain": c.chain, "aria-label": `Chain ${c.chain + 1}` },
        state, el("h3", {}, `Chain ${c.chain + 1}: ${c.text}`),
        el("p", { class: "muted" }, `${c.seed.length} seed fact(s) from the retriever`), list, result));
    }
    status.textContent = `Reasoning in ${e.chains.length} chain(s)…`;
  });
  on("search", async (e) => {
    const card = cards[e.chain];
    if (!card) return;
    const results = e.search.results;
    await ensureLabels(results).catch(() => {});
    card.list.append(el("div", { class: "search-result" },
      el("strong", {}, `${e.search.mode === "bridge" ? "Bridge" : "Anchor"} search: `), e.search.query,
      results.length ? el("ul", {}, results.slice(0, 8).map((p) => el("li", {}, p.text))) : null,
      results.length > 8 ? el("p", { class: "muted" }, `and ${results.length - 8} more`) : null,
      e.search.note ? el("p", { class: "muted" }, e.search.note) : null));
  });
  on("chain_done", (e) => {
    const card = cards[e.chain];
    if (!card) return;
    card.state.textContent = e.finish_reason;
    card.result.replaceChildren(el("strong", {}, "Chain answer: "), e.answer);
  });
  on("claims", () => { status.textContent = "Writing the answer…"; });
  on("answer", async (e) => { await showAnswer(e.answer, answer); markChains(e.answer, cards); });
  on("done", () => { status.textContent = "Done."; button.disabled = false; source.close(); });
  on("error", (e) => { status.textContent = ""; live.prepend(errorBox(new Error(e.message))); button.disabled = false; source.close(); });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) return;
    source.close(); button.disabled = false;
    if (status.textContent !== "Done.") status.textContent = "The connection to the server was lost (or the ask was refused: too many asks?).";
  };
}

async function showAnswer(data, into) {
  const cited = [], owners = [];
  data.claims.forEach((claim, i) => claim.citations.forEach((path) => {
    const key = path.steps.map((s) => `${s.subject} ${s.relation} ${s.object}`).join("|");
    let at = cited.findIndex((p) => p.key === key);
    if (at < 0) { at = cited.length; cited.push({ key, path }); owners.push(new Set()); }
    owners[at].add(i);
  }));
  const paths = cited.map((c) => c.path);
  await ensureLabels(paths).catch(() => {});
  const picture = paths.length
    ? drawPaths(paths, (r) => ({ "data-claims": [...owners[r]].join(" ") })) : el("p", {}, "No cited paths.");
  const buttons = [];
  const highlight = (index) => {
    buttons.forEach((b, i) => b.setAttribute("aria-pressed", i === index ? "true" : "false"));
    picture.querySelectorAll(".path-row").forEach((row) => {
      const mine = row.dataset.claims.split(" ").includes(String(index));
      row.classList.toggle("hl", index >= 0 && mine);
      row.classList.toggle("dim", index >= 0 && !mine);
    });
  };
  const claims = el("ol", { class: "claims", id: "ask-claims" }, data.claims.map((claim, i) => {
    const b = el("button", { type: "button", class: "secondary claim-button", "aria-pressed": "false",
      "data-claim": i, onclick: () => highlight(b.getAttribute("aria-pressed") === "true" ? -1 : i) },
    `Show ${claim.citations.length} cited path(s)`);
    buttons.push(b);
    return el("li", {}, claim.text, " ", b);
  }));
  const parts = [verdictBox(data.support), el("h2", {}, "Answer"),
    el("div", { class: "answer", id: "ask-answer-text" }, markedSentences(data.answer, data.sentences || []))];
  if (data.unsupported_text) {
    parts.push(el("section", { class: "own-words", id: "ask-unsupported", "aria-label": "Not supported" },
      el("h2", {}, "The model\u2019s own words \u2014 NOT supported by the knowledge graph, not its answer"),
      el("p", {}, data.unsupported_text)));
  }
  if (data.flags && data.flags.length) {
    parts.push(el("h2", {}, "Flags"), el("ul", { id: "ask-flags", class: "flags" }, data.flags.map((f) =>
      el("li", { "data-code": f.code }, el("span", { class: "code" }, f.code), " ", f.message))));
  }
  parts.push(el("h2", {}, "Claims and the graph paths they cite"), claims,
    el("div", { class: "graph", id: "ask-graph" }, picture));
  if (data.conflicts && data.conflicts.length) {
    parts.push(el("h2", {}, "Conflicts"), el("ul", { id: "ask-conflicts" }, data.conflicts.map((c) => {
      const votes = Object.entries(c.votes || {}).map(([k, v]) => `${label(k)} ${v}`).join(", ");
      return el("li", {}, el("strong", {}, c.kind), " ", c.reason, votes ? el("span", { class: "muted" }, ` (votes: ${votes})`) : null);
    })));
  }
  if (data.dropped_claims && data.dropped_claims.length) {
    parts.push(el("h2", {}, "Dropped claims"), el("ul", { id: "ask-dropped" }, data.dropped_claims.map((c) =>
      el("li", { "data-status": c.status }, el("strong", {}, (c.entity && c.entity.label) || c.text),
        ` (${c.status}): ${c.reason}`))));
  }
  if (data.notes && data.notes.length) {
    parts.push(el("h2", {}, "Notes"), el("ul", { id: "ask-notes" }, data.notes.map((n) => el("li", {}, n))));
  }
  into.replaceChildren(...parts);
}

const VERDICTS = { grounded: "Grounded in the knowledge graph", partial: "Partly supported by the knowledge graph",
  unsupported: "Not supported by the knowledge graph" };

// How grounded the answer is, shown before the answer itself.
function verdictBox(support) {
  const verdict = (support && support.verdict) || "unsupported";
  return el("div", { class: `verdict ${verdict}`, id: "ask-verdict", role: "note", "data-verdict": verdict },
    el("strong", {}, VERDICTS[verdict] || verdict), ": ", (support && support.reason) || "not checked");
}

// The answer text with each checked sentence in its own span; one no claim supports is marked, with why.
function markedSentences(text, sentences) {
  const nodes = [];
  let at = 0;
  for (const check of sentences) {
    const start = text.indexOf(check.text, at);
    if (start < 0) continue;
    if (start > at) nodes.push(text.slice(at, start));
    nodes.push(el("span", { class: check.supported ? "sentence" : "sentence unsupported",
      title: check.supported ? check.reason : `Not supported by the knowledge graph: ${check.reason}`,
      "data-claims": check.claims.join(" ") }, check.text));
    at = start + check.text.length;
  }
  if (at < text.length) nodes.push(text.slice(at));
  return nodes;
}

// Each chain card says whether the synthesizer kept anything of its answer, and what of it was dropped and why.
function markChains(data, cards) {
  (data.chains || []).forEach((chain, i) => {
    const card = cards[i];
    if (!card) return;
    const dropped = (chain.dropped_claims || []).map((j) => (data.dropped_claims || [])[j]).filter(Boolean);
    if (dropped.length) {
      card.result.after(el("p", { class: "dropped-note" }, "Dropped from this chain: ",
        dropped.map((c) => `${(c.entity && c.entity.label) || c.text} (${c.status})`).join(", ")));
    }
    if (chain.kept) return;
    card.result.classList.add("not-kept");
    card.result.before(el("p", { class: "not-kept-note" },
      "Not kept: no claim of this chain\u2019s answer survived; it is not part of the graph\u2019s answer."));
  });
}

// -- routing ------------------------------------------------------------------------------------------------------

function route() {
  const hash = location.hash || "#/";
  const [path, query] = hash.slice(1).split("?");
  const params = new URLSearchParams(query || "");
  if (path.startsWith("/entity/")) entityView(decodeURIComponent(path.slice(8)));
  else if (path === "/paths") pathsView(params);
  else if (path === "/ask") askView(params);
  else homeView();
}

document.addEventListener("DOMContentLoaded", () => {
  autocomplete(document.getElementById("search-box"), document.getElementById("search-box-list"),
    (item) => go(entityHref(item.id)));
  window.addEventListener("hashchange", route);
  route();
});
