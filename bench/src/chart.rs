//! The SVG chart: server CPU per request, grouped by workload, one bar per variant.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::Result;
use crate::measure::Measurement;
use crate::variants::{ALL, Variant};
use crate::workload::WORKLOADS;

const SIZE: (u32, u32) = (900, 520);
/// Width of one bar: the variants share 80% of a workload's slot.
const BAR: f64 = 0.8 / ALL.len() as f64;

fn color(variant: &Variant) -> RGBColor {
    let (r, g, b) = variant.color;
    RGBColor(r, g, b)
}

/// Left edge of a bar: workloads sit in unit slots, variants side by side inside them.
fn bar_x(m: &Measurement) -> f64 {
    let slot = WORKLOADS
        .iter()
        .position(|w| w.name == m.workload)
        .unwrap_or(0);
    slot as f64 + 0.1 + m.variant.index() as f64 * BAR
}

fn draw_workload_names(root: &DrawingArea<SVGBackend, Shift>, chart: &Chart) -> Result<()> {
    let style = TextStyle::from(("sans-serif", 16)).pos(Pos::new(HPos::Center, VPos::Top));
    for (slot, workload) in WORKLOADS.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(slot as f64 + 0.5, 0.0));
        root.draw(&Text::new(workload.name, (x, y + 10), style.clone()))?;
    }
    Ok(())
}

pub fn write_svg(results: &[Measurement], path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let top = results.iter().map(|m| m.cpu_us_per_req).fold(0.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Server CPU per request (µs), lower is better",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..WORKLOADS.len() as f64, 0.0..top.max(1e-6))?;
    // The mesh's own x labels would fall at round numbers, not on the workloads: none here,
    // and each workload's name is written under its group instead.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .light_line_style(TRANSPARENT)
        .y_desc("server CPU µs per request")
        .draw()?;
    draw_workload_names(&root, &chart)?;
    for variant in ALL {
        draw_variant(&mut chart, results, variant)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One variant's bars, with their values printed on top, and its legend entry.
fn draw_variant(chart: &mut Chart, results: &[Measurement], variant: &Variant) -> Result<()> {
    let fill = color(variant).filled();
    let mine: Vec<&Measurement> = results.iter().filter(|m| m.variant == variant).collect();
    chart
        .draw_series(mine.iter().map(|m| {
            let x = bar_x(m);
            Rectangle::new([(x, 0.0), (x + BAR * 0.9, m.cpu_us_per_req)], fill)
        }))?
        .label(variant.name)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], fill));
    let value_style = TextStyle::from(("sans-serif", 12)).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(mine.iter().map(|m| {
        let at = (bar_x(m) + BAR * 0.45, m.cpu_us_per_req);
        Text::new(format!("{:.2}", m.cpu_us_per_req), at, value_style.clone())
    }))?;
    Ok(())
}
