//! Charts, drawn with plotters into PNG (and SVG) without any system library: text is
//! rendered with `ab_glyph` from the DejaVu Sans font embedded in the binary (the `dejavu`
//! crate), registered once before the first chart.
//!
//! Two kinds of figure cover every chart of the harness: panels of line charts
//! ([`LineChart`], linear or logarithmic axes) and owner timelines ([`TimelinePanel`]: x is
//! time, y the contender, a bar per hold).

use anyhow::{anyhow, Context};
use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::{Path, PathBuf};
use std::sync::Once;

/// The font family every chart uses.
pub const FONT: &str = "sans-serif";

static FONTS: Once = Once::new();

/// Registers the embedded DejaVu Sans as [`FONT`] (once per process).
pub fn register_fonts() {
    FONTS.call_once(|| {
        // The embedded fonts are valid TrueType files; failure here would be a packaging bug,
        // and charts would then fail with a "font unavailable" error of their own.
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// A color per algorithm: fixed for the two thesis algorithms, from a palette otherwise.
pub fn algorithm_color(name: &str) -> RGBColor {
    match name {
        "shadow" => RGBColor(214, 39, 40),
        "queue" => RGBColor(31, 119, 180),
        other => {
            let index = crate::engines::algorithm_names()
                .iter()
                .position(|n| *n == other)
                .unwrap_or(other.len());
            PALETTE[index % PALETTE.len()]
        }
    }
}

/// `color` halfway to white: for a companion line (an ideal, a bound).
pub fn lighter(color: RGBColor) -> RGBColor {
    let mix = |c: u8| ((c as u16 + 255) / 2) as u8;
    RGBColor(mix(color.0), mix(color.1), mix(color.2))
}

/// Colors for series that are not algorithms.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Line color.
    pub color: RGBColor,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Draw a marker on every point.
    pub markers: bool,
}

impl Series {
    /// A series with markers.
    pub fn new(name: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), color, points, markers: true }
    }
}

/// A line chart (one panel).
#[derive(Debug, Clone, Default)]
pub struct LineChart {
    /// Caption.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis.
    pub x_log: bool,
    /// Logarithmic y axis.
    pub y_log: bool,
    /// Fixed y range (otherwise from the data).
    pub y_range: Option<(f64, f64)>,
    /// The lines.
    pub series: Vec<Series>,
    /// Where the legend goes.
    pub legend: Legend,
}

impl LineChart {
    /// `series` against the number of contenders on a log x axis, y from the data, legend in
    /// the upper left: the layout of the sweep's contention charts and of `engines.png`.
    pub fn against_contenders(
        title: &str,
        y_label: &str,
        y_log: bool,
        series: Vec<Series>,
    ) -> Self {
        LineChart {
            title: title.into(),
            x_label: "contenders (log)".into(),
            y_label: y_label.into(),
            x_log: true,
            y_log,
            y_range: None,
            series,
            legend: Legend::UpperLeft,
        }
    }
}

/// Corner of the legend box.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Legend {
    /// Upper left (default).
    #[default]
    UpperLeft,
    /// Upper right.
    UpperRight,
    /// Lower left.
    LowerLeft,
    /// Lower right.
    LowerRight,
}

/// Which files to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Formats {
    /// PNG only.
    Png,
    /// PNG and SVG.
    PngAndSvg,
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing failed: {e:?}")
}

fn paths(base: &Path, formats: Formats) -> Vec<PathBuf> {
    let mut out = vec![base.with_extension("png")];
    if formats == Formats::PngAndSvg {
        out.push(base.with_extension("svg"));
    }
    out
}

fn grid(n: usize, cols: usize, panel: (u32, u32)) -> (u32, u32, usize, usize) {
    let cols = cols.clamp(1, n.max(1));
    let rows = n.max(1).div_ceil(cols);
    (panel.0 * cols as u32, panel.1 * rows as u32, rows, cols)
}

/// Draws `charts` as panels of one figure (`cols` per row, each `panel` pixels) into
/// `base.png` (and `base.svg`); returns the files written.
pub fn render_lines(
    base: &Path,
    charts: &[LineChart],
    cols: usize,
    panel: (u32, u32),
    formats: Formats,
) -> anyhow::Result<Vec<PathBuf>> {
    register_fonts();
    let (w, h, rows, cols) = grid(charts.len(), cols, panel);
    let files = paths(base, formats);
    fn draw<DB: DrawingBackend>(
        root: DrawingArea<DB, Shift>,
        charts: &[LineChart],
        rows: usize,
        cols: usize,
    ) -> anyhow::Result<()> {
        root.fill(&WHITE).map_err(err)?;
        for (area, chart) in root.split_evenly((rows, cols)).iter().zip(charts) {
            draw_line_chart(area, chart)?;
        }
        root.present().map_err(err)
    }
    for file in &files {
        if is_svg(file) {
            draw(SVGBackend::new(file, (w, h)).into_drawing_area(), charts, rows, cols)
        } else {
            draw(BitMapBackend::new(file, (w, h)).into_drawing_area(), charts, rows, cols)
        }
        .with_context(|| format!("cannot draw {}", file.display()))?;
    }
    Ok(files)
}

fn is_svg(file: &Path) -> bool {
    file.extension().is_some_and(|e| e == "svg")
}

fn bounds(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let vals: Vec<f64> = values.filter(|v| v.is_finite() && (!log || *v > 0.0)).collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        let (lo, hi) = if lo == hi { (lo / 2.0, hi * 2.0) } else { (lo, hi) };
        (lo / 1.4, hi * 1.4)
    } else {
        let lo = lo.min(0.0);
        let hi = if hi <= lo { lo + 1.0 } else { hi };
        (lo, hi + (hi - lo) * 0.08)
    }
}

/// A compact label for an axis value: at most three significant digits, no trailing zeros,
/// `k` for thousands.
pub fn fmt_num(v: f64) -> String {
    fn trim(text: String) -> String {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    }
    let a = v.abs();
    if a == 0.0 || !v.is_finite() {
        return "0".into();
    }
    if a >= 10_000.0 {
        return trim(format!("{:.1}", v / 1000.0)) + "k";
    }
    if a < 0.001 {
        return format!("{v:.0e}");
    }
    let digits = (2 - a.log10().floor() as i32).clamp(0, 4) as usize;
    trim(format!("{v:.digits$}"))
}

/// Tick values of a logarithmic axis over `[lo, hi]`: labelled (`bold`) at 1-2-5 steps, or
/// finer for a short range, or decades only for a long one; light grid lines at every
/// integer multiple of a decade.
pub fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    if !(lo > 0.0 && hi > lo && lo.is_finite() && hi.is_finite()) {
        return (Vec::new(), Vec::new());
    }
    let decades = (hi / lo).log10();
    let steps: &[f64] = if decades <= 1.2 {
        &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0]
    } else if decades <= 3.5 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mut bold = Vec::new();
    let mut light = Vec::new();
    for k in k0..=k1 {
        let decade = 10f64.powi(k);
        for m in steps {
            let v = m * decade;
            if v >= lo && v <= hi {
                bold.push(v);
            }
        }
        for m in 1..=9 {
            let v = m as f64 * decade;
            if v >= lo && v <= hi {
                light.push(v);
            }
        }
    }
    (bold, light)
}

fn draw_line_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &LineChart,
) -> anyhow::Result<()> {
    let xs = bounds(chart.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)), chart.x_log);
    let ys = chart.y_range.unwrap_or_else(|| {
        bounds(chart.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)), chart.y_log)
    });
    let log = |(lo, hi): (f64, f64)| {
        let (bold, light) = log_ticks(lo, hi);
        (lo..hi).log_scale().with_key_points(bold).with_light_points(light)
    };
    match (chart.x_log, chart.y_log) {
        (false, false) => plot(area, chart, xs.0..xs.1, ys.0..ys.1),
        (true, false) => plot(area, chart, log(xs), ys.0..ys.1),
        (false, true) => plot(area, chart, xs.0..xs.1, log(ys)),
        (true, true) => plot(area, chart, log(xs), log(ys)),
    }
}

fn plot<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    chart: &LineChart,
    x: X,
    y: Y,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut ctx = ChartBuilder::on(area)
        .caption(&chart.title, (FONT, 20))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(62)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_label_formatter(&|v| fmt_num(*v))
        .y_label_formatter(&|v| fmt_num(*v))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(205, 205, 205))
        .draw()
        .map_err(err)?;
    for s in &chart.series {
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| {
                x.is_finite()
                    && y.is_finite()
                    && (!chart.x_log || *x > 0.0)
                    && (!chart.y_log || *y > 0.0)
            })
            .collect();
        let color = s.color;
        ctx.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(&s.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if s.markers {
            ctx.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(err)?;
        }
    }
    if chart.series.iter().any(|s| !s.name.is_empty()) {
        ctx.configure_series_labels()
            .position(match chart.legend {
                Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
                Legend::UpperRight => SeriesLabelPosition::UpperRight,
                Legend::LowerLeft => SeriesLabelPosition::LowerLeft,
                Legend::LowerRight => SeriesLabelPosition::LowerRight,
            })
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .label_font((FONT, 13))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// One panel of an owner timeline: a bar per hold, at the holder's row.
#[derive(Debug, Clone)]
pub struct TimelinePanel {
    /// Caption.
    pub title: String,
    /// Bar color.
    pub color: RGBColor,
    /// Rows: contenders `0..contenders`.
    pub contenders: usize,
    /// Holds: (contender, start s, end s).
    pub holds: Vec<(u32, f64, f64)>,
    /// The time window shown, in seconds.
    pub window: (f64, f64),
    /// Fault windows shaded behind the holds: (start s, end s, kind).
    pub faults: Vec<(f64, f64, String)>,
}

/// Draws timeline panels stacked vertically into `base.png` (and `base.svg`).
pub fn render_timelines(
    base: &Path,
    panels: &[TimelinePanel],
    width: u32,
    formats: Formats,
) -> anyhow::Result<Vec<PathBuf>> {
    register_fonts();
    let heights: Vec<u32> =
        panels.iter().map(|p| 110 + 18 * p.contenders.clamp(2, 40) as u32).collect();
    let total: u32 = heights.iter().sum::<u32>().max(1);
    let files = paths(base, formats);
    fn draw<DB: DrawingBackend>(
        root: DrawingArea<DB, Shift>,
        panels: &[TimelinePanel],
        heights: &[u32],
    ) -> anyhow::Result<()> {
        root.fill(&WHITE).map_err(err)?;
        let mut rest = root.clone();
        for (panel, h) in panels.iter().zip(heights) {
            let (top, bottom) = rest.split_vertically(*h);
            draw_timeline(&top, panel)?;
            rest = bottom;
        }
        root.present().map_err(err)
    }
    for file in &files {
        if is_svg(file) {
            draw(SVGBackend::new(file, (width, total)).into_drawing_area(), panels, &heights)
        } else {
            draw(BitMapBackend::new(file, (width, total)).into_drawing_area(), panels, &heights)
        }
        .with_context(|| format!("cannot draw {}", file.display()))?;
    }
    Ok(files)
}

fn draw_timeline<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &TimelinePanel,
) -> anyhow::Result<()> {
    let n = panel.contenders.max(1) as f64;
    let (t0, t1) = panel.window;
    let mut ctx = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(62)
        .build_cartesian_2d(t0..t1.max(t0 + 1e-3), -0.5..n - 0.5)
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc("time (s)")
        .y_desc("contender")
        .y_labels(panel.contenders.clamp(2, 16))
        .y_label_formatter(&|v| {
            if v.fract().abs() < 1e-9 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .x_label_formatter(&|v| fmt_num(*v))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(err)?;
    // The faults first, behind the holds, each labelled with its kind at the top.
    let shown = |&&(s, e, _): &&(f64, f64, String)| e >= t0 && s <= t1;
    ctx.draw_series(panel.faults.iter().filter(shown).map(|(s, e, _)| {
        Rectangle::new([(s.max(t0), -0.5), (e.min(t1), n - 0.5)], RGBColor(255, 226, 196).filled())
    }))
    .map_err(err)?;
    ctx.draw_series(panel.faults.iter().filter(shown).map(|(s, _, kind)| {
        Text::new(
            kind.clone(),
            (s.max(t0), n - 0.5),
            (FONT, 11).into_font().color(&RGBColor(150, 80, 20)),
        )
    }))
    .map_err(err)?;
    let color = panel.color;
    ctx.draw_series(panel.holds.iter().filter(|(_, s, e)| *e >= t0 && *s <= t1).map(
        |&(c, s, e)| {
            let y = c as f64;
            // At least a pixel-ish wide, so that short holds stay visible.
            let e = e.max(s + (t1 - t0) / 1500.0);
            Rectangle::new([(s.max(t0), y - 0.38), (e.min(t1), y + 0.38)], color.filled())
        },
    ))
    .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_line_charts_and_timelines() {
        let dir = std::env::temp_dir().join(format!("bench-harness-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let chart = LineChart {
            title: "latency".into(),
            x_label: "contenders".into(),
            y_label: "ms".into(),
            x_log: true,
            y_log: true,
            y_range: None,
            legend: Legend::UpperLeft,
            series: vec![
                Series::new(
                    "queue",
                    algorithm_color("queue"),
                    vec![(1.0, 8.0), (2.0, 20.0), (4.0, 60.0)],
                ),
                Series::new(
                    "shadow",
                    algorithm_color("shadow"),
                    vec![(1.0, 8.0), (2.0, 200.0), (4.0, 900.0)],
                ),
            ],
        };
        let linear = LineChart { x_log: false, y_log: false, ..chart.clone() };
        let files =
            render_lines(&dir.join("lines"), &[chart, linear], 2, (500, 320), Formats::PngAndSvg)
                .unwrap();
        for f in &files {
            assert!(std::fs::metadata(f).unwrap().len() > 1000, "{}", f.display());
        }
        let panel = TimelinePanel {
            title: "queue".into(),
            color: algorithm_color("queue"),
            contenders: 2,
            holds: vec![(0, 0.0, 0.005), (1, 0.02, 0.025)],
            window: (0.0, 0.05),
            faults: vec![(0.01, 0.03, "pause".into())],
        };
        let files =
            render_timelines(&dir.join("timeline"), &[panel.clone(), panel], 600, Formats::Png)
                .unwrap();
        assert!(std::fs::metadata(&files[0]).unwrap().len() > 1000);
        let _ = std::fs::remove_dir_all(dir);
        assert_eq!(fmt_num(20_000.0), "20k");
        assert_eq!(fmt_num(5.0), "5");
        assert_eq!(fmt_num(0.5), "0.5");
        assert_eq!(fmt_num(1.5), "1.5");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(1234.0), "1234");
        let (bold, light) = log_ticks(1.0, 300.0);
        assert_eq!(bold, vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]);
        assert_eq!(light.len(), 9 + 9 + 3);
        assert_eq!(log_ticks(1.0, 1e6).0.len(), 7);
    }
}
