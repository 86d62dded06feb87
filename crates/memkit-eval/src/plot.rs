//! SVG charts of a report, drawn with plotters' SVG backend.
//!
//! plotters is built without default features: no font files are loaded and no font crate is
//! compiled in. The SVG backend writes labels as native `<text>` elements (sans-serif) that any
//! SVG viewer renders; plotters only estimates text extents for layout, which is why margins
//! and label areas here are generous.
//!
//! Budgets are drawn as equally spaced categories: the SPEC budgets double at each step, so this
//! is a log2 axis with exact tick labels.

use std::collections::BTreeMap;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::metrics::{SystemMetrics, sorted_entries};

const SIZE: (u32, u32) = (820, 520);

/// Tableau 10: distinguishable colours that stay readable on white (plotters' Palette99 has
/// yellow third).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// `n` categories 0..n (plotters' integer ranges include their end, hence `n - 1`).
fn categories(n: usize) -> plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordusize> {
    (0..n.max(1) - 1).into_segmented()
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

type Chart<'a, 'b, X> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>;

/// A named line with a dot at each point, listed in the legend.
fn draw_line<X>(chart: &mut Chart<'_, '_, X>, name: &str, points: Vec<(X::ValueType, f64)>, color: RGBColor) -> Result<(), String>
where
    X: plotters::coord::ranged1d::Ranged,
    X::ValueType: Clone + 'static,
{
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, color.filled()))).map_err(err)?;
    Ok(())
}

/// The legend, lower right.
fn draw_legend<'b, X: plotters::coord::ranged1d::Ranged>(chart: &mut Chart<'b, 'b, X>) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)
}

/// Budgets present in any system, in numeric order.
fn budgets(systems: &[SystemMetrics]) -> Vec<String> {
    let mut all: BTreeMap<String, ()> = BTreeMap::new();
    for s in systems {
        for k in s.evidence_recall_at.keys() {
            all.insert(k.clone(), ());
        }
    }
    sorted_entries(&all).into_iter().map(|(k, _)| k.clone()).collect()
}

/// One line per system: evidence recall (0..1) against the token budget.
pub fn recall_vs_budget(systems: &[SystemMetrics], title: &str) -> Result<String, String> {
    let budgets = budgets(systems);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = budgets.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{title}: evidence recall vs token budget"), ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(60)
            .build_cartesian_2d(categories(n), 0.0..1.0)
            .map_err(err)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("token budget (tokens, log2 spacing)")
            .y_desc("evidence recall")
            .x_labels(n)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => budgets.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_labels(11)
            .y_label_formatter(&|y| format!("{y:.1}"))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
        for (i, s) in systems.iter().enumerate() {
            let color = color(i);
            let points: Vec<(SegmentValue<usize>, f64)> = budgets
                .iter()
                .enumerate()
                .filter_map(|(j, b)| s.evidence_recall_at.get(b).map(|r| (SegmentValue::CenterOf(j), *r)))
                .collect();
            draw_line(&mut chart, &s.name, points, color)?;
        }
        draw_legend(&mut chart)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One bar per system: mean context tokens per query.
pub fn tokens_per_query(systems: &[SystemMetrics], title: &str) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = systems.len().max(1);
        let top = systems.iter().map(|s| s.mean_context_tokens).fold(0.0, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{title}: context tokens per query"), ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(70)
            .build_cartesian_2d(categories(n), 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_desc("system")
            .y_desc("mean tokens per query")
            .x_labels(n)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => systems.get(*i).map(|s| s.name.clone()).unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(systems.iter().enumerate().map(|(i, s)| {
                let mut bar =
                    Rectangle::new([(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), s.mean_context_tokens)], color(i).filled());
                bar.set_margin(0, 0, 18, 18);
                bar
            }))
            .map_err(err)?;
        chart
            .draw_series(systems.iter().enumerate().map(|(i, s)| {
                Text::new(
                    format!("{:.0}", s.mean_context_tokens),
                    (SegmentValue::CenterOf(i), s.mean_context_tokens),
                    ("sans-serif", 14).into_font().color(&BLACK).pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Bottom,
                    )),
                )
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One line per named series of `(x, y)` points, `y` a share in 0..1, `x` from 0 to the largest
/// one: a learning curve (figures against optimiser steps).
pub fn lines(series: &[(String, Vec<(f64, f64)>)], title: &str, x_desc: &str, y_desc: &str) -> Result<String, String> {
    let x_max = series.iter().flat_map(|(_, points)| points.iter().map(|p| p.0)).fold(1.0f64, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..1.0)
            .map_err(err)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc(x_desc)
            .y_desc(y_desc)
            .y_labels(11)
            .y_label_formatter(&|y| format!("{y:.1}"))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
        for (i, (name, points)) in series.iter().enumerate().filter(|(_, (_, p))| !p.is_empty()) {
            let color = color(i);
            draw_line(&mut chart, name, points.clone(), color)?;
        }
        draw_legend(&mut chart)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}
