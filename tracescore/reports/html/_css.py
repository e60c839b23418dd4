"""The one stylesheet of every page, inlined by :func:`._page._document` (nothing is fetched).

Light and dark colour schemes (``prefers-color-scheme``), a narrow-screen layout and print
rules; monitor badges are ``.st-STATE``, comparison verdicts ``.v-VERDICT``. No user text.
"""

from __future__ import annotations

_CSS = """
:root{--bg:#f6f6f3;--card:#fff;--ink:#1d2126;--muted:#6a7079;--line:#e3e3de;--soft:#f0f0ec;
--good:#2e7d5b;--good-bg:#e3f1ea;--bad:#b8432f;--bad-bg:#f8e5e0;--warn:#a8741a;--warn-bg:#f6ecd6;--faint:#d5d7db;--none:#8a94a6;
--accent:#3f5a8a;--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
@media (prefers-color-scheme:dark){:root{--bg:#15171a;--card:#1d2024;--ink:#e6e6e3;
--muted:#9aa0a8;--line:#2e3237;--soft:#24272c;--good:#5fb98f;--good-bg:#1f3a2e;--bad:#e07a64;
--bad-bg:#402520;--warn:#d6a24a;--warn-bg:#3a3020;--faint:#454a52;--none:#7d8799;--accent:#8fa9d8}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,
"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;-webkit-font-smoothing:antialiased}
main{max-width:1280px;margin:0 auto;padding:32px 28px 48px}
h1{font-size:26px;font-weight:650;letter-spacing:-.01em;margin:0}
h2{font-size:19px;font-weight:620;margin:0}
h3{font-size:16px;font-weight:600;margin:0}
h4{font-size:11px;font-weight:600;text-transform:uppercase;letter-spacing:.06em;
color:var(--muted);margin:0 0 4px}
.sub{color:var(--muted);margin:4px 0 0;font-size:14px}
.mono,code{font-family:var(--mono);font-size:.9em}
code{background:var(--soft);padding:1px 5px;border-radius:4px}
.top{display:flex;justify-content:space-between;align-items:flex-end;margin-bottom:22px}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px}
.tile{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 16px}
.tl{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.06em}
.tv{font-size:26px;font-weight:620;font-variant-numeric:tabular-nums;margin:2px 0}
.tn{font-size:12px;color:var(--muted)}
.tile.bad .tv{color:var(--bad)}.tile.warn .tv{color:var(--warn)}
.h2row{display:flex;align-items:baseline;justify-content:space-between;gap:16px;
flex-wrap:wrap;margin:36px 0 14px;border-bottom:1px solid var(--line);padding-bottom:8px}
.legend{margin:0;color:var(--muted);font-size:13px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 4px 0 10px;
vertical-align:-1px}
.sw.pass{background:var(--good)}.sw.fail{background:var(--bad)}.sw.none{background:var(--none)}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:16px 18px}
.from{font-weight:400;color:var(--muted);font-size:13px;margin-left:4px}
.dir{margin:0;color:var(--muted);font-size:12px}
.headline{display:flex;align-items:baseline;gap:8px;margin:6px 0 6px}
.big{font-size:34px;font-weight:650;font-variant-numeric:tabular-nums;letter-spacing:-.02em}
.bl{color:var(--muted);font-size:13px}
.good{color:var(--good)}.bad{color:var(--bad)}
.passbar{display:flex;height:6px;border-radius:3px;overflow:hidden;background:var(--soft);
margin-bottom:10px}
.passbar .pass{background:var(--good);opacity:.75}.passbar .fail{background:var(--bad);opacity:.8}
dl.stats{display:grid;grid-template-columns:repeat(4,1fr);gap:6px 10px;margin:0 0 6px}
dl.stats dt{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}
dl.stats dd{margin:0;font-variant-numeric:tabular-nums;font-weight:550}
figure{margin:10px 0 0}
figcaption{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.06em}
svg.chart{width:100%;height:auto;display:block;overflow:visible}
svg .grid{stroke:var(--line);stroke-width:1}
svg .axis{stroke:var(--muted);stroke-width:1;opacity:.6}
svg .ax{fill:var(--muted);font-size:10px;font-family:inherit;font-variant-numeric:tabular-nums}
svg .pass{fill:var(--good);opacity:.8}svg .fail{fill:var(--bad);opacity:.85}
svg .none{fill:var(--none);opacity:.8}svg .emptybin{fill:var(--line)}
svg .bin:hover rect{opacity:1}
svg .thr{stroke:var(--ink);stroke-width:1;stroke-dasharray:3 3;opacity:.45}
svg .line{fill:none;stroke:var(--accent);stroke-width:1.8;stroke-linejoin:round}
svg .pt{fill:var(--accent);stroke:var(--card);stroke-width:1}
svg .pt.good{fill:var(--good)}svg .pt.bad{fill:var(--bad)}
.nodata{color:var(--muted);font-size:14px}
.skipnote{margin:4px 0;padding:6px 10px;border-radius:6px;background:var(--bad-bg);
color:var(--bad);font-size:13px}
.skipbanner{margin-top:14px;border-color:var(--warn)}
.skipbanner h3{color:var(--warn);font-size:15px}
.skipbanner ul{margin:6px 0 0;padding-left:18px;font-size:14px}
.worst{margin-top:12px;border-top:1px solid var(--line);padding-top:8px}
.worst ol{list-style:none;margin:0;padding:0;font-size:13px}
.worst li{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.worst a{color:var(--ink);text-decoration:none}.worst a:hover{text-decoration:underline}
.v{font-variant-numeric:tabular-nums;font-weight:600;margin-right:6px}
.record{margin-bottom:14px}
.record .query{font-size:17px}
.meta{margin:2px 0 0;color:var(--muted);font-size:13px}
p.warn{margin:6px 0 0;padding:4px 8px;background:var(--warn-bg);color:var(--ink);border-left:3px solid var(--warn);font-size:13px}
.why{list-style:none;padding:0;margin:10px 0;display:grid;
grid-template-columns:max-content 1fr;gap:5px 10px;align-items:baseline;font-size:14px}
.why li{display:contents}
.chip{justify-self:start;border-radius:999px;padding:1px 10px;font-size:12.5px;background:var(--soft);
color:var(--ink);font-variant-numeric:tabular-nums}
.chip.bad{background:var(--bad-bg);color:var(--bad)}
.chip.good{background:var(--good-bg);color:var(--good)}
.expl{color:var(--muted)}
.qa{display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:14px;
margin:10px 0}
.field{background:var(--soft);border-radius:8px;padding:10px 12px}
.text{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
.missing{color:var(--muted)}
details{margin-top:8px}
summary{cursor:pointer;color:var(--accent);font-size:14px}
details ol{margin:8px 0 0;padding-left:0;list-style:none;display:grid;gap:8px}
details li{border-left:3px solid var(--line);padding:2px 0 2px 12px}
.cmeta{font-size:12px;color:var(--muted)}
details .text{font-size:14px}
table{border-collapse:collapse;width:100%;font-size:13.5px;margin-top:6px}
th{text-align:left;font-weight:600;color:var(--muted);font-size:12px;
border-bottom:1px solid var(--line);padding:4px 8px}
td{border-bottom:1px solid var(--soft);padding:4px 8px;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.cost{display:grid;grid-template-columns:minmax(0,2fr) minmax(280px,1fr);gap:16px;
align-items:start}
.cost dl.stats{grid-template-columns:repeat(3,1fr);margin-top:8px}
th.num{text-align:right}
.cost p{margin:8px 0 0}.note{color:var(--muted);font-size:13px}
button{font:inherit;font-size:13px;color:var(--accent);background:none;
border:1px solid var(--line);border-radius:6px;padding:2px 10px;cursor:pointer}
.empty{background:var(--card);border:1px dashed var(--line);border-radius:12px;padding:28px;
text-align:center;color:var(--muted);margin-top:24px}
footer{margin-top:40px;color:var(--muted);font-size:12.5px}
.ci{margin:-2px 0 8px;color:var(--muted);font-size:13px;font-variant-numeric:tabular-nums}
.clip{text-transform:none;letter-spacing:0}
svg .band{fill:var(--accent);opacity:.17}
svg .bandbar{stroke:var(--accent);stroke-width:5;opacity:.25;stroke-linecap:round}
svg .tick{stroke:var(--muted);opacity:.6}
svg .rel line{stroke:var(--ink);stroke-width:1.2;stroke-dasharray:4 3;opacity:.6}
svg .rel text,svg .rel0{fill:var(--ink);font-size:10.5px;font-weight:600}
svg .rel0{fill:var(--muted);font-weight:500}
.relkey{display:inline-block;width:0;height:11px;border-left:1.5px dashed var(--ink);
margin:0 4px 0 8px;vertical-align:-1px;opacity:.7}
.trendcard header{display:flex;justify-content:space-between;align-items:baseline;gap:8px;
flex-wrap:wrap}
.tnow{color:var(--muted);font-size:12.5px;font-variant-numeric:tabular-nums}
.grid.trend{grid-template-columns:repeat(auto-fill,minmax(520px,1fr))}
.badge{display:inline-block;border-radius:999px;padding:0 9px;font-size:11.5px;font-weight:650;
letter-spacing:.04em;white-space:nowrap;line-height:1.7}
.st-OK{background:var(--good-bg);color:var(--good)}
.st-WARNING{background:var(--warn-bg);color:var(--warn)}
.st-ALERT{background:var(--bad);color:#fff}
.st-NO_DATA{background:var(--soft);color:var(--muted)}
.monitors{margin-bottom:16px}
.monitors.card{border-left:4px solid var(--good)}
.monitors.card.worst-ALERT{border-left-color:var(--bad)}
.monitors.card.worst-WARNING{border-left-color:var(--warn)}
.monitors.card.worst-NO_DATA{border-left-color:var(--none)}
.mhead{display:flex;justify-content:space-between;align-items:baseline;gap:12px;flex-wrap:wrap}
.mcounts{margin:0;font-size:13px}.mcounts b{margin-right:8px}
.mname{font-weight:600;white-space:nowrap}
.msum{color:var(--muted);font-size:13px}
.monitors td{vertical-align:top}.when{color:var(--muted);white-space:nowrap;font-size:12.5px}
.stripcell{min-width:180px;width:24%}
svg.strip{width:100%;height:14px;display:block}
svg .sbg{fill:var(--soft)}
svg .s-OK{fill:var(--good);opacity:.75}svg .s-WARNING{fill:var(--warn)}
svg .s-ALERT{fill:var(--bad)}svg .s-NO_DATA{fill:var(--none);opacity:.45}
.history{margin-top:16px}
.changes{list-style:none;margin:8px 0 0;padding:0;display:grid;gap:4px;font-size:13.5px}
table.strips td{border:0;padding:3px 8px 3px 0}
table.strips td.mname{width:22%}table.strips td.stripcell{width:78%}
table.strips tr.scale td{padding-top:0;color:var(--muted);font-size:11.5px}
table.strips tr.scale td span:last-child{float:right}
.notices{margin-top:14px;border-color:var(--bad)}
.notices ul{margin:0;padding-left:18px;font-size:14px}
.notices.pending{border-color:var(--warn)}.notices h3{margin:0 0 6px;font-size:14px}
.groups{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:16px}
.group .dim{color:var(--muted);font-weight:500}
.v-regressed{--vc:var(--bad)}.v-improved{--vc:var(--good)}.v-changed{--vc:var(--warn)}
.v-no-change{--vc:var(--accent)}.v-no-evidence{--vc:var(--none)}
.v-not-enough-data{--vc:var(--faint)}
.verdict{display:inline-block;border-radius:999px;padding:0 10px;font-size:12.5px;
font-weight:620;color:#fff;background:var(--vc,var(--none));white-space:nowrap;line-height:1.7}
.verdict.v-not-enough-data{color:var(--ink)}
svg .ci{stroke:var(--vc,var(--none));stroke-width:7;stroke-linecap:round}
svg .est{fill:var(--vc,var(--none));stroke:var(--card);stroke-width:1.5}
svg .eq{fill:var(--soft);stroke:var(--line)}
svg .zero{stroke:var(--ink);stroke-width:1;opacity:.5}
svg.diff{width:260px;display:block}
.difftext{margin-top:2px;font-size:12.5px;font-variant-numeric:tabular-nums;white-space:nowrap;
margin-left:12px}
table.cmp td{vertical-align:middle}
table.cmp tr.v-regressed td:first-child{box-shadow:inset 3px 0 var(--bad)}
.sname{font-weight:600}
.sides .sidev{font-size:20px;overflow-wrap:anywhere}
.banner{margin:16px 0 0}
.banner.v-regressed{border-color:var(--bad);background:var(--bad-bg);color:var(--bad)}
.chips{display:flex;gap:8px;flex-wrap:wrap;margin:12px 0}
.notes{margin-top:24px;color:var(--muted);font-size:13.5px}
.notes h3{color:var(--ink);font-size:14px}.notes li{margin:3px 0}
@media (max-width:900px){.cost{grid-template-columns:1fr}.grid.trend,.groups{grid-template-columns:1fr}}
@media (max-width:560px){main{padding:18px 14px}dl.stats{grid-template-columns:repeat(3,1fr)}}
@media print{details{display:block}.tile,.card{break-inside:avoid}}
"""
