//! The chart: load at the dependency over time, one line per strategy, one panel per scenario.
//!
//! Drawn with `plotters`' SVG backend, which writes text as SVG `<text>` elements and so needs no
//! font library. The output is a plain string: the same figures give the same bytes.

use plotters::coord::combinators::BindKeyPoints;
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
    let height = PANEL_HEIGHT * u32::try_from(runs.len().max(1)).unwrap_or(1);
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let panels = root.split_evenly((runs.len().max(1), 1));
        for ((scenario, reports), panel) in runs.iter().zip(panels.iter()) {
            draw(panel, scenario, reports).map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The chart's width, and each panel's height, in pixels.
const WIDTH: u32 = 960;
const PANEL_HEIGHT: u32 = 340;
/// The strip at a panel's top for its title (two lines), and at its right for the legend, which
/// sits beside the plot so that it never hides a line.
const TITLE_HEIGHT: u32 = 40;
const LEGEND_WIDTH: u32 = 230;
/// Characters of the title's font that fit on one line of the panel (13 px sans-serif).
const TITLE_CHARS: usize = 140;

/// `text` in at most two lines of `width` characters, broken between words; the second ends in
/// an ellipsis if the text is longer still.
fn two_lines(text: &str, width: usize) -> [String; 2] {
    let mut lines = [String::new(), String::new()];
    let mut line = 0;
    for word in text.split_whitespace() {
        let current = &lines[line];
        let fits =
            current.is_empty() || current.chars().count() + 1 + word.chars().count() <= width;
        if !fits {
            if line == 1 {
                lines[1].push_str(" …");
                break;
            }
            line = 1;
        }
        if !lines[line].is_empty() {
            lines[line].push(' ');
        }
        lines[line].push_str(word);
    }
    lines
}

/// For each report, the earlier report whose load line it repeats exactly, if any: identical
/// strategies would otherwise draw one line over the other.
fn repeats<'a>(reports: &[&'a Report]) -> Vec<Option<&'a str>> {
    reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            reports[..i]
                .iter()
                .find(|earlier| earlier.attempts_per_second == r.attempts_per_second)
                .map(|earlier| earlier.strategy.as_str())
        })
        .collect()
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    scenario: &Scenario,
    reports: &[&Report],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (title, body) = area.split_vertically(TITLE_HEIGHT);
    let (plot, legend) = body.split_horizontally(WIDTH - LEGEND_WIDTH);
    let lines = two_lines(
        &format!("{}: {}", scenario.name, scenario.description),
        TITLE_CHARS,
    );
    for (n, line) in (0i32..).zip(&lines) {
        title.draw(&Text::new(
            line.clone(),
            (12, 6 + 16 * n),
            ("sans-serif", 13).into_font(),
        ))?;
    }
    let seconds = scenario.duration.as_secs().max(1) as f64;
    let mut chart = ChartBuilder::on(&plot)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(52)
        .build_cartesian_2d(
            0.0..seconds,
            (FLOOR..100.0)
                .log_scale()
                .with_key_points(vec![FLOOR, 0.1, 1.0, 10.0, 100.0]),
        )?;
    chart
        .configure_mesh()
        .x_desc("simulated seconds")
        .y_desc("load at the dependency / offered")
        .x_label_formatter(&|x| format!("{x:.0}"))
        // The floor is where a second with no attempts at all is drawn.
        .y_label_formatter(&|y| {
            if *y <= FLOOR {
                "none".to_string()
            } else {
                format!("{y}x")
            }
        })
        .light_line_style(WHITE)
        .draw()?;
    if let Some((a, b)) = scenario.dependency.fault_window(scenario.duration) {
        let (a, b) = (a.as_nanos() as f64 / 1e9, b.as_nanos() as f64 / 1e9);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(a, FLOOR), (b, 100.0)],
            RGBColor(255, 0, 0).mix(0.07).filled(),
        )))?;
    }
    let same = repeats(reports);
    let mut row = 0;
    for (i, r) in reports.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let offered = r.calls as f64 / seconds;
        let dashed = same[i].is_some();
        let points: Vec<(f64, f64)> = (0..scenario.duration.as_secs() as usize)
            .map(|s| {
                let a = f64::from(r.attempts_per_second.get(s).copied().unwrap_or(0));
                let y = if offered > 0.0 { a / offered } else { 0.0 };
                (s as f64 + 0.5, y.max(FLOOR))
            })
            .collect();
        if dashed {
            // Dashed over the line it repeats, so both stay visible.
            chart.draw_series(DashedLineSeries::new(points, 6, 5, colour.stroke_width(2)))?;
        } else {
            chart.draw_series(LineSeries::new(points, colour.stroke_width(2)))?;
        }
        let y = 12 + 15 * row;
        legend.draw(&PathElement::new(
            vec![(4, y), (24, y)],
            colour.stroke_width(2),
        ))?;
        legend.draw(&Text::new(
            r.strategy.clone(),
            (30, y - 6),
            ("sans-serif", 11).into_font(),
        ))?;
        row += 1;
        if let Some(earlier) = same[i] {
            legend.draw(&Text::new(
                format!("dashed: the same as {earlier}"),
                (30, 12 + 15 * row - 6),
                ("sans-serif", 10).into_font().color(&BLACK.mix(0.6)),
            ))?;
            row += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::two_lines;

    #[test]
    fn a_long_title_wraps_between_words_onto_a_second_line_and_is_cut_after_it() {
        let [first, second] = two_lines("one two three four five six", 9);
        assert_eq!(first, "one two");
        assert_eq!(second, "three …");
        let [first, second] = two_lines("short", 9);
        assert_eq!((first.as_str(), second.as_str()), ("short", ""));
    }
}
