//! The chart: load at the dependency over time, one line per strategy, one panel per scenario.
//!
//! Drawn with `plotters`' SVG backend, which writes text as SVG `<text>` elements and so needs no
//! font library. The output is a plain string: the same figures give the same bytes.

use plotters::prelude::*;

use crate::report::Report;
use crate::scenario::Scenario;

/// Line colours, one per strategy in table order (colour-blind-safe where it can be).
const PALETTE: [RGBColor; 9] = [
    RGBColor(120, 120, 120),
    RGBColor(213, 94, 0),
    RGBColor(230, 159, 0),
    RGBColor(0, 114, 178),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// The lowest value the log axis shows: a second with no attempts at all is drawn here.
const FLOOR: f64 = 0.01;

/// The scenarios worth a panel, each with its reports: open-loop runs with an impairment, no
/// longer than ten minutes (an hour of stationary noise is a flat line).
#[must_use]
pub fn charted<'a>(
    scenarios: &'a [Scenario],
    reports: &'a [Vec<Report>],
) -> Vec<(&'a Scenario, Vec<&'a Report>)> {
    scenarios
        .iter()
        .zip(reports)
        .filter(|(s, rs)| {
            s.arrivals.is_open_loop()
                && !s.dependency.impairments.is_empty()
                && s.duration.as_secs() <= 600
                && !rs.is_empty()
        })
        .map(|(s, rs)| (s, rs.iter().collect()))
        .collect()
}

/// Draws the panels for `runs` (each a scenario and its reports) into an SVG string. The y axis
/// is the load at the dependency relative to the load offered: attempts per second over the
/// fleet's mean calls per second (1 = one attempt per call; log scale).
pub fn svg(runs: &[(&Scenario, Vec<&Report>)]) -> Result<String, String> {
    let mut out = String::new();
    let height = 320 * u32::try_from(runs.len().max(1)).unwrap_or(1);
    {
        let root = SVGBackend::with_string(&mut out, (960, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let panels = root.split_evenly((runs.len().max(1), 1));
        for ((scenario, reports), panel) in runs.iter().zip(panels.iter()) {
            draw(panel, scenario, reports).map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    scenario: &Scenario,
    reports: &[&Report],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let seconds = scenario.duration.as_secs().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: {}", scenario.name, scenario.description),
            ("sans-serif", 15),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..seconds, (FLOOR..100.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("simulated seconds")
        .y_desc("load at the dependency / offered")
        .y_label_formatter(&|y| format!("{y}x"))
        .light_line_style(WHITE)
        .draw()?;
    if let Some((a, b)) = scenario.dependency.fault_window(scenario.duration) {
        let (a, b) = (a.as_nanos() as f64 / 1e9, b.as_nanos() as f64 / 1e9);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(a, FLOOR), (b, 100.0)],
            RGBColor(255, 0, 0).mix(0.07).filled(),
        )))?;
    }
    for (i, r) in reports.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let offered = r.calls as f64 / seconds;
        let points: Vec<(f64, f64)> = (0..scenario.duration.as_secs() as usize)
            .map(|s| {
                let a = f64::from(r.attempts_per_second.get(s).copied().unwrap_or(0));
                let y = if offered > 0.0 { a / offered } else { 0.0 };
                (s as f64 + 0.5, y.max(FLOOR))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(r.strategy.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 11))
        .draw()?;
    Ok(())
}
