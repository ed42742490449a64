// The lineage explorer's page: search, an asset's details, its column graph, a column's lineage.
// Data: data/index.json (every asset, for the search) and data/a/<shard>.json (a few assets each), loaded lazily.
// A column's lineage walks those files with the rules of lineage_defs.plan.impact.ColumnGraph.walk:
// breadth-first over the column edges, each column once, and a scan (downstream) reaches an asset's
// rows and stops there. The files hold that graph's edges, so the answer is `lineage-defs impact`'s.
'use strict';

const MAX_DRAWN = 250; // columns drawn in the graph at most (the lists below it name every one)
const S = { drawn: null, index: null, byUri: new Map(), files: new Map(), cy: null, asset: null, node: null, lineage: null, token: 0 };

// -- data -----------------------------------------------------------------------------
async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}

function loadAsset(uri) { // an asset's document: its shard file (data/a/<shard>.json), fetched once
  const entry = S.byUri.get(uri);
  if (!entry) return Promise.resolve(null);
  let p = S.files.get(entry[1]);
  if (!p) S.files.set(entry[1], (p = getJSON(`data/a/${entry[1]}.json`)));
  return p.then((shard) => shard[uri] || null);
}

function split(node) { // "<uri>.<col>" → [uri, col] (as ColumnGraph does: the last dot)
  const i = node.lastIndexOf('.');
  return [node.slice(0, i), node.slice(i + 1)];
}

async function walk(start, upstream) {
  const seen = new Set([start]);
  const found = [];
  let level = [start];
  for (let depth = 1; level.length; depth++) {
    const files = await Promise.all(level.map((n) => loadAsset(split(n)[0])));
    const next = [];
    level.forEach((node, i) => {
      const a = files[i];
      if (!a) return;
      const hops = (upstream ? a.in : a.out)[split(node)[1]] || [];
      for (const [other, kind] of hops) {
        if (seen.has(other)) continue;
        seen.add(other);
        const rows = kind === 'scan' && !upstream; // the asset's rows: the walk stops here
        found.push({ node: other, from: node, kind, depth, rows, upstream });
        if (!rows) next.push(other);
      }
    });
    level = next;
  }
  return found;
}

// -- DOM helpers ----------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function route(uri, node) {
  return `#/asset/${encodeURIComponent(uri)}${node ? `/column/${encodeURIComponent(node)}` : ''}`;
}

function shortName(uri) {
  const tail = uri.replace(/\/+$/, '').split('/').pop();
  return tail || uri;
}

// -- search ---------------------------------------------------------------------------
function search(q) {
  q = q.trim().toLowerCase();
  const out = [];
  if (!q) return out;
  const dot = q.lastIndexOf('.');
  const [qa, qc] = dot > 0 ? [q.slice(0, dot), q.slice(dot + 1)] : [null, null];
  for (const [uri, , kind, cols] of S.index.assets) {
    const u = uri.toLowerCase();
    if (u.includes(q)) out.push({ uri, kind, node: null, score: shortName(u) === q ? 0 : 2 });
    for (const c of cols) {
      const cl = c.toLowerCase();
      const hit = cl.includes(q) || (qa !== null && u.includes(qa) && cl.startsWith(qc)) || `${u}.${cl}`.includes(q);
      if (hit) out.push({ uri, kind, node: `${uri}.${c}`, score: cl === q || (qa !== null && cl === qc && shortName(u) === qa) ? 1 : 3 });
    }
    if (out.length > 2000) break;
  }
  out.sort((a, b) => a.score - b.score || a.uri.localeCompare(b.uri));
  return out.slice(0, 40);
}

function showResults() {
  const box = document.getElementById('results');
  const found = search(document.getElementById('search').value);
  box.replaceChildren(...found.map((r, i) => el('li', {
    class: i === 0 ? 'active' : null, dataset: { uri: r.uri, node: r.node || '' },
    onmousedown: (ev) => { ev.preventDefault(); go(r.uri, r.node); },
  }, r.node ? el('span', { class: 'col' }, split(r.node)[1]) : el('span', { class: 'col' }, shortName(r.uri)),
  el('span', { class: 'uri' }, r.uri), el('span', { class: 'badge' }, r.node ? 'column' : r.kind))));
  box.hidden = found.length === 0;
}

function go(uri, node) {
  document.getElementById('results').hidden = true;
  document.getElementById('search').blur();
  location.hash = route(uri, node);
}

// -- an asset's page --------------------------------------------------------------------
function statusOf(a) {
  if (!a.last) return el('span', { class: 'muted' }, S.index.instance ? 'no run recorded' : 'no Dagster instance read (set DAGSTER_HOME)');
  const when = new Date(a.last.time * 1000).toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
  return el('span', {}, el('span', { class: `status-${a.last.status}` }, a.last.status), ` ${when}`,
    a.last.partition ? ` (partition ${a.last.partition})` : '', ' · ', el('a', { href: a.last.run_url, target: '_blank' }, 'run'));
}

function renderPage(a) {
  const testsOf = (c) => a.tests.filter((t) => t.column === c).map((t) => t.name).join(', ');
  const assetLinks = (list) => list.length ? el('ul', {}, list.map((u) => el('li', {}, el('a', { href: route(u) }, u)))) : el('p', { class: 'muted' }, 'none');
  const p = a.partitions;
  const page = document.getElementById('page');
  page.replaceChildren(
    el('h1', {}, shortName(a.uri)),
    el('code', { id: 'asset-uri' }, a.uri), ' ', el('span', { class: 'badge' }, a.kind === 'dbt' ? 'dbt model' : a.kind),
    el('p', { class: 'links' }, el('a', { id: 'dagster-link', href: a.dagster_url, target: '_blank' }, 'Open in Dagster')),
    el('p', { class: 'desc' }, (a.description || '').replace(/([^\n])\n(?!\n)/g, '$1 ')),
    el('dl', {},
      el('dt', {}, 'last status'), el('dd', { id: 'last-status' }, statusOf(a)),
      el('dt', {}, 'owners'), el('dd', {}, a.owners.length ? a.owners.join(', ') : el('span', { class: 'muted' }, 'none')),
      el('dt', {}, 'partitions'), el('dd', {}, p ? `${p.kind}${p.start ? ` from ${p.start}` : ''}${p.tz ? ` (${p.tz})` : ''}` : el('span', { class: 'muted' }, 'not partitioned')),
      a.source ? [el('dt', {}, 'source'), el('dd', {}, el('code', {}, a.source))] : null,
      a.strategy ? [el('dt', {}, 'strategy'), el('dd', {}, a.strategy)] : null,
      a.relation ? [el('dt', {}, 'relation'), el('dd', {}, el('code', {}, a.relation))] : null,
      a.tags.length ? [el('dt', {}, 'tags'), el('dd', {}, a.tags.join(', '))] : null),
    el('h2', {}, `Columns (${a.columns.length})`),
    a.columns.length ? el('table', { id: 'columns' }, el('tr', {}, el('th', {}, 'column'), el('th', {}, 'type'), el('th', {}, 'tests')),
      a.columns.map((c) => el('tr', { dataset: { node: `${a.uri}.${c.name}` } },
        el('td', {}, el('button', { onclick: () => select(`${a.uri}.${c.name}`) }, c.name)),
        el('td', { title: c.typed_by ? `from the ${c.typed_by}` : null }, c.type || el('span', { class: 'muted' }, '?')),
        el('td', {}, testsOf(c.name))))) : el('p', { class: 'muted' }, 'no columns known'),
    el('h2', {}, `Data tests (${a.tests.length})`),
    a.tests.length ? el('ul', { id: 'tests' }, a.tests.map((t) => el('li', {}, el('b', {}, t.name), t.column ? ` on ${t.column}` : '', ` (${t.severity}) `,
      el('span', { class: 'muted' }, t.line ? `${t.file}:${t.line}` : t.file)))) : el('p', { class: 'muted' }, 'none'),
    el('h2', {}, 'Upstream assets'), assetLinks(a.upstream),
    el('h2', {}, 'Downstream assets'), assetLinks(a.downstream));
}

// -- the graph --------------------------------------------------------------------------
const STYLE = [
  { selector: 'node', style: { 'z-index-compare': 'manual', shape: 'round-rectangle', width: 190, height: 22, 'background-color': '#ffffff', 'border-width': 1, 'border-color': '#aab2c0', label: 'data(label)', 'font-size': 11, 'min-zoomed-font-size': 6, 'text-valign': 'center', 'text-halign': 'center', color: '#1f2430' } },
  { selector: 'node.box', style: { width: 'data(w)', height: 'data(h)', 'z-index': 0, 'background-color': '#eef1f6', 'border-color': '#8b95a7', 'text-valign': 'top', 'text-halign': 'center', 'text-margin-y': 16, 'font-size': 12, 'font-weight': 600 } },
  { selector: 'node.box.dbt', style: { 'background-color': '#fdf0e6' } },
  { selector: 'node.box.focus', style: { 'border-width': 2, 'border-color': '#1f2430' } },
  { selector: 'node.column', style: { 'z-index': 10 } },
  { selector: 'node.rows', style: { 'border-style': 'dashed', 'font-style': 'italic' } },
  { selector: 'edge', style: { 'z-index-compare': 'manual', 'z-index': 5, width: 1.2, 'line-color': '#b5bcc8', 'target-arrow-color': '#b5bcc8', 'target-arrow-shape': 'triangle', 'curve-style': 'bezier', 'arrow-scale': 0.8 } },
  { selector: 'edge.scan', style: { 'line-style': 'dashed' } },
  { selector: '.dim', style: { opacity: 0.35 } },
  { selector: 'node.up', style: { 'background-color': '#dbeafe', 'border-color': '#1d4ed8', 'border-width': 2 } },
  { selector: 'node.down', style: { 'background-color': '#dcfce7', 'border-color': '#15803d', 'border-width': 2 } },
  { selector: 'node.sel', style: { 'background-color': '#fde68a', 'border-color': '#b45309', 'border-width': 3 } },
  { selector: 'edge.hl', style: { width: 2.2, 'line-color': '#475569', 'target-arrow-color': '#475569' } },
];

// nodes: Map node → {asset, column|null, depth}; edges: [[from, to, kind]]
function draw(nodes, edges, focus, selected) {
  const assets = new Map(); // uri → {depth, cols: []}
  for (const [node, n] of nodes) {
    let g = assets.get(n.asset);
    if (!g) assets.set(n.asset, (g = { depth: n.asset === focus ? 0 : n.depth, cols: [] }));
    g.cols.push([node, n]);
  }
  const layers = new Map();
  for (const [uri, g] of assets) (layers.get(g.depth) || layers.set(g.depth, []).get(g.depth)).push([uri, g]);
  const els = [];
  for (const [depth, list] of layers) {
    list.sort((x, y) => x[0].localeCompare(y[0]));
    const height = list.reduce((h, [, g]) => h + 60 + 28 * g.cols.length, 0);
    let y = -height / 2;
    for (const [uri, g] of list) {
      // an asset is a box drawn behind its columns (not a compound node: those cost seconds on large graphs)
      const entry = S.byUri.get(uri);
      const h = 40 + 28 * g.cols.length;
      els.push({ data: { id: `a:${uri}`, label: shortName(uri), asset: uri, w: 214, h }, position: { x: depth * 300, y: y + h / 2 }, classes: ['box', entry ? entry[2] : 'external', uri === focus ? 'focus' : ''].join(' ') });
      y += 36;
      for (const [node, n] of g.cols) {
        const cls = ['column', n.column === null ? 'rows' : '', n.cls || ''].join(' ');
        els.push({ data: { id: `c:${node}`, label: n.column === null ? '(rows: scan)' : n.column, node, asset: uri }, position: { x: depth * 300, y: y + 11 }, classes: cls });
        y += 28;
      }
      y += 4 + 20;
    }
  }
  const seen = new Set();
  for (const [from, to, kind] of edges) {
    const id = `e:${from}>${to}`;
    if (seen.has(id) || !nodes.has(from) || !nodes.has(to)) continue;
    seen.add(id);
    const hl = selected && (nodes.get(from).cls && nodes.get(to).cls);
    els.push({ data: { id, source: `c:${from}`, target: `c:${to}`, kind }, classes: `${kind}${hl ? ' hl' : ''}` });
  }
  if (S.cy) S.cy.destroy();
  const cy = (S.cy = window.cy = cytoscape({ container: document.getElementById('graph'), elements: els, style: STYLE, layout: { name: 'preset' }, minZoom: 0.05, maxZoom: 3, pixelRatio: 1, hideEdgesOnViewport: els.length > 400 }));
  S.drawn = new Promise((resolve) => cy.one('render', resolve)); // the canvas's first frame
  if (selected) {
    cy.nodes('.column').filter((n) => !n.hasClass('sel') && !n.hasClass('up') && !n.hasClass('down')).addClass('dim');
    cy.edges().not('.hl').addClass('dim');
  }
  cy.fit(undefined, 30);
  if (cy.zoom() > 1.2) { cy.zoom(1.2); cy.center(); }
  cy.on('tap', 'node', (ev) => {
    const n = ev.target;
    if (n.hasClass('box')) { if (n.data('asset') !== S.asset) location.hash = route(n.data('asset')); return; }
    if (n.data('node') && !n.hasClass('rows')) select(n.data('node'));
  });
}

function neighbourhood(a) {
  const nodes = new Map();
  const edges = [];
  const add = (node, depth, rows) => {
    if (nodes.has(node)) return;
    const [asset, column] = rows ? [node, null] : split(node);
    nodes.set(node, { asset, column, depth });
  };
  for (const c of a.columns) add(`${a.uri}.${c.name}`, 0, false);
  for (const [col, hops] of Object.entries(a.in)) for (const [src, kind] of hops) { add(src, -1, false); edges.push([src, `${a.uri}.${col}`, kind]); }
  for (const [col, hops] of Object.entries(a.out)) {
    for (const [tgt, kind] of hops) { add(tgt, 1, kind === 'scan'); edges.push([`${a.uri}.${col}`, tgt, kind]); }
  }
  if (a.scans.length) {
    add(a.uri, 0, true);
    for (const [src, kind] of a.scans) { add(src, -1, false); edges.push([src, a.uri, kind]); }
  }
  return { nodes, edges };
}

async function renderGraph(a) {
  const head = document.getElementById('graph-head');
  const lineage = document.getElementById('lineage');
  if (!S.node) {
    const { nodes, edges } = neighbourhood(a);
    draw(nodes, edges, a.uri, false);
    head.textContent = `${shortName(a.uri)} and its neighbours: ${nodes.size} columns. Click a column to highlight where it comes from and where it goes.`;
    lineage.replaceChildren();
    return;
  }
  const token = ++S.token;
  head.textContent = `walking the lineage of ${S.node}…`;
  const t0 = performance.now();
  const [up, down] = await Promise.all([walk(S.node, true), walk(S.node, false)]);
  if (token !== S.token) return;
  const t1 = performance.now();
  S.lineage = { node: S.node, up, down };
  const nodes = new Map();
  const [selAsset, selCol] = split(S.node);
  nodes.set(S.node, { asset: selAsset, column: selCol, depth: 0, cls: 'sel' });
  const reached = [...up, ...down].sort((x, y) => x.depth - y.depth);
  for (const r of reached.slice(0, MAX_DRAWN)) {
    const [asset, column] = r.rows ? [r.node, null] : split(r.node);
    if (!nodes.has(r.node)) nodes.set(r.node, { asset, column, depth: r.upstream ? -r.depth : r.depth, cls: r.upstream ? 'up' : 'down' });
  }
  if (selAsset === a.uri) for (const c of a.columns) if (!nodes.has(`${a.uri}.${c.name}`)) nodes.set(`${a.uri}.${c.name}`, { asset: a.uri, column: c.name, depth: 0 });
  const edges = [];
  for (const node of nodes.keys()) {
    const n = nodes.get(node);
    if (n.column === null) continue;
    const f = await loadAsset(n.asset);
    for (const [tgt, kind] of (f && f.out[n.column]) || []) edges.push([node, tgt, kind]);
  }
  if (token !== S.token) return;
  draw(nodes, edges, selAsset, true);
  const drawn = reached.length > MAX_DRAWN ? ` (the graph draws the nearest ${MAX_DRAWN})` : '';
  head.textContent = `${S.node}: ${up.length} upstream, ${down.length} downstream${drawn}. Click another column, or the asset's box to open it.`;
  const item = (r) => el('li', { dataset: { node: r.node } }, el('a', { href: route(r.rows ? r.node : split(r.node)[0], r.rows ? null : r.node) }, r.rows ? `${r.node} (rows)` : r.node),
    ' ', el('span', { class: 'kind' }, `${r.kind}, ${r.depth} hop${r.depth === 1 ? '' : 's'}`));
  lineage.replaceChildren(
    el('h3', {}, `Upstream of ${S.node} (${up.length})`), el('ul', { id: 'upstream' }, up.map(item)),
    el('h3', {}, `Downstream of ${S.node} (${down.length})`), el('ul', { id: 'downstream' }, down.map(item)));
  S.timing = { walk: t1 - t0, draw: performance.now() - t1 }; // ms (the benchmark reads them)
  document.body.dataset.selection = S.node;
}

function select(node) {
  location.hash = route(S.asset, node);
}

// -- routing --------------------------------------------------------------------------
async function show() {
  const m = location.hash.match(/^#\/asset\/([^/]+)(?:\/column\/([^/]+))?$/);
  document.body.dataset.selection = '';
  if (!m) return home();
  const uri = decodeURIComponent(m[1]);
  const node = m[2] ? decodeURIComponent(m[2]) : null;
  const a = await loadAsset(uri);
  if (!a) {
    document.getElementById('page').replaceChildren(el('h1', {}, 'Not found'), el('p', {}, `No asset ${uri} in this build.`));
    return;
  }
  if (S.asset !== uri) { S.asset = uri; renderPage(a); }
  S.node = node;
  for (const tr of document.querySelectorAll('#columns tr')) tr.classList.toggle('selected', tr.dataset.node === node);
  document.title = `${shortName(uri)} · lineage explorer`;
  await renderGraph(a);
  if (S.cy) await S.drawn;
  if (!window.explorerRendered) window.explorerRendered = performance.now(); // first render: details, search box and graph drawn
  document.body.dataset.state = 'ready';
}

function home() {
  S.asset = null;
  const counts = { dbt: 0, script: 0, external: 0 };
  for (const a of S.index.assets) counts[a[2]]++;
  document.getElementById('page').replaceChildren(
    el('h1', {}, 'Lineage explorer'),
    el('p', {}, `${S.index.assets.length} assets: ${counts.script} from scripts, ${counts.dbt} dbt models, ${counts.external} external inputs. Search an asset or a column above.`),
    el('p', { class: 'muted' }, `Built ${S.index.built} from ${S.index.folder}${S.index.instance ? ', with the Dagster instance\'s last runs' : ''}.`),
    S.index.errors.length ? [el('h2', {}, 'Planning errors'), el('pre', { class: 'errors' }, S.index.errors.join('\n'))] : null);
  if (S.cy) { S.cy.destroy(); S.cy = window.cy = null; }
  document.getElementById('graph-head').textContent = '';
  document.getElementById('lineage').replaceChildren();
  document.body.dataset.state = 'ready';
}

async function main() {
  S.index = await getJSON('data/index.json');
  for (const a of S.index.assets) S.byUri.set(a[0], a);
  document.getElementById('summary').textContent = `${S.index.assets.length} assets`;
  const input = document.getElementById('search');
  input.addEventListener('input', showResults);
  input.addEventListener('focus', showResults);
  input.addEventListener('blur', () => { document.getElementById('results').hidden = true; });
  input.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Enter') return;
    const first = document.querySelector('#results li');
    if (first) go(first.dataset.uri, first.dataset.node || null);
  });
  window.addEventListener('hashchange', show);
  await show();
}

window.explorer = { walk, search, state: S };
main().catch((e) => {
  document.getElementById('page').replaceChildren(el('h1', {}, 'Could not load the site'), el('pre', { class: 'errors' }, String(e)));
});
