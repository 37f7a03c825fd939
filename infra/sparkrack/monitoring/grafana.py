"""Grafana as code: the Prometheus datasource, the dashboard provider and the dashboard, built with
grafana-foundation-sdk from the Plan.

The layout follows seed 001: fifty panels on one page are unusable, so everything sits in
collapsible rows with only the overview open, and a `node` variable selects one box or all.
Latency quantiles carry an "idle" value mapping: histogram_quantile over a window without
requests is NaN, which Grafana would otherwise draw as a hole that reads like an outage.
`sparkrack monitoring lint` reads the same mapping to tell idle from broken.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

import yaml
from grafana_foundation_sdk.builders import common as options
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

from sparkrack.monitoring import panels
from sparkrack.monitoring.panels import PanelDef, Query
from sparkrack.plan import Plan
from sparkrack.text.addresses import http_url

GRAFANA_PROVISIONING_DIR = "/etc/grafana/provisioning"
GRAFANA_DASHBOARDS_DIR = "/var/lib/grafana/dashboards"
DATASOURCE_UID = "sparkrack-prometheus"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
DASHBOARD_UID = "sparkrack"
IDLE = "idle"
FULL_WIDTH = 24


def grafana_files(plan: Plan) -> dict[str, str]:
    """Relative path -> content: provisioning/ goes under GRAFANA_PROVISIONING_DIR, dashboards/
    under GRAFANA_DASHBOARDS_DIR's parent (the provider points at GRAFANA_DASHBOARDS_DIR)."""
    return {
        "provisioning/datasources/sparkrack.yaml": datasource_yaml(plan),
        "provisioning/dashboards/sparkrack.yaml": provider_yaml(),
        f"dashboards/{DASHBOARD_UID}.json": dashboard_json(plan),
    }


def prometheus_url(plan: Plan) -> str:
    """The head's Prometheus on its management address: Grafana is never on the fabric."""
    monitoring = plan.monitoring
    return http_url(plan.node(monitoring.prometheus_node).address, monitoring.prometheus_port, "")


def datasource_yaml(plan: Plan) -> str:
    source = {
        "name": "Prometheus",
        "uid": DATASOURCE_UID,
        "type": "prometheus",
        "access": "proxy",
        "url": prometheus_url(plan),
        "isDefault": True,
        "editable": False,
        "jsonData": {"timeInterval": f"{plan.monitoring.scrape_interval_s}s"},
    }
    text: str = yaml.safe_dump({"apiVersion": 1, "datasources": [source]}, sort_keys=False)
    return text


def provider_yaml() -> str:
    provider = {
        "name": "sparkrack",
        "type": "file",
        "disableDeletion": True,
        "allowUiUpdates": False,
        "options": {"path": GRAFANA_DASHBOARDS_DIR},
    }
    text: str = yaml.safe_dump({"apiVersion": 1, "providers": [provider]}, sort_keys=False)
    return text


def dashboard_json(plan: Plan) -> str:
    return json.dumps(build_dashboard(plan).build(), cls=JSONEncoder, indent=2) + "\n"


def build_dashboard(plan: Plan) -> dash.Dashboard:
    board = (
        dash.Dashboard(f"sparkrack {plan.stack}")
        .uid(DASHBOARD_UID)
        .tags(["sparkrack", plan.stack])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .readonly()
        .with_variable(node_variable())
    )
    ids = itertools.count(1)
    rows = panels.dashboard_rows(plan)
    overview_title, overview = rows[0]
    # Grafana shows an open row's panels only when they follow the row at the top level; a
    # collapsed row carries its panels inside it.
    board.with_row(dash.Row(overview_title).collapsed(False).id(next(ids)))
    for definition in overview:
        board.with_panel(build_panel(definition, next(ids)))
    for title, definitions in rows[1:]:
        row = dash.Row(title).collapsed(True).id(next(ids))
        for definition in definitions:
            row.with_panel(build_panel(definition, next(ids)))
        board.with_row(row)
    return board


def node_variable() -> dash.QueryVariable:
    return (
        dash.QueryVariable("node")
        .label("node")
        .description("one node, several, or all")
        .datasource(DATASOURCE)
        .query("label_values(up, node)")
        .refresh(model.VariableRefresh.ON_DASHBOARD_LOAD)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def build_panel(definition: PanelDef, panel_id: int) -> Builder[model.Panel]:
    builder = stat_panel(definition) if definition.kind == "stat" else timeseries_panel()
    builder.id(panel_id).title(definition.title).datasource(DATASOURCE).unit(definition.unit)
    builder.span(definition.width).height(definition.height)
    if definition.description:
        builder.description(definition.description)
    builder.targets(list(targets(definition.queries)))
    if definition.idle:
        builder.mappings([idle_mapping()]).no_value(IDLE)
    if definition.mappings:
        builder.mappings(value_mappings(definition.mappings))
    if definition.minimum is not None:
        builder.min(definition.minimum)
    return builder


def timeseries_panel() -> timeseries.Panel:
    legend = (
        options.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.LIST)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
    )
    tooltip = options.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
    return timeseries.Panel().legend(legend).tooltip(tooltip)


def stat_panel(definition: PanelDef) -> stat.Panel:
    # "last", not "lastNotNull": an idle window's NaN must reach the "idle" mapping.
    calcs = ["last"] if definition.idle else ["lastNotNull"]
    return (
        stat.Panel()
        .reduce_options(options.ReduceDataOptions().calcs(calcs).values(False))
        .graph_mode(common.BigValueGraphMode.NONE)
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
    )


def targets(queries: Iterable[Query]) -> Iterable[prometheus.Dataquery]:
    for index, query in enumerate(queries):
        yield (
            prometheus.Dataquery()
            .expr(query.expr)
            .legend_format(query.legend)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )


def idle_mapping() -> model.ValueMapping:
    return model.SpecialValueMap(
        options=model.DashboardSpecialValueMapOptions(
            match=model.SpecialValueMatch.NULL_AND_NAN,
            result=model.ValueMappingResult(text=IDLE, color="text", index=0),
        )
    )


def value_mappings(texts: dict[str, str]) -> list[model.ValueMapping]:
    options = {
        value: model.ValueMappingResult(text=text, index=index)
        for index, (value, text) in enumerate(texts.items())
    }
    return [model.ValueMap(options=options)]
