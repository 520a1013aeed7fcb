//! `--plot DIR`: PNG charts drawn with plotters' bitmap backend — throughput over time and
//! latency CDF per workload (one line per engine), and write amplification by cause as stacked
//! bars per writing workload. Text uses a TrueType font found under /usr/share/fonts (or
//! `$SCREE_PLOT_FONT`); without one the charts are drawn without any text instead of failing.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Context};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::metrics::{moving_rates, rates};
use super::RunResult;

const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (1000, 600);

/// Finds and registers a font once; `false` when there is none (draw without text).
fn font_available() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        let Some(bytes) = find_font() else {
            return false;
        };
        // plotters keeps the font for the life of the process, so leaking it is intended.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok()
    })
}

fn find_font() -> Option<Vec<u8>> {
    if let Some(p) = std::env::var_os("SCREE_PLOT_FONT") {
        if p.is_empty() {
            return None; // SCREE_PLOT_FONT= (empty) forces text-less charts.
        }
        return std::fs::read(p).ok();
    }
    let preferred = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    ];
    for p in preferred {
        if let Ok(b) = std::fs::read(p) {
            return Some(b);
        }
    }
    // Any TrueType font, depth-first.
    let mut stack = vec![PathBuf::from("/usr/share/fonts")];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf")) {
                if let Ok(b) = std::fs::read(&p) {
                    return Some(b);
                }
            }
        }
    }
    None
}

fn color(i: usize) -> RGBColor {
    const P: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    P.get(i % P.len()).copied().unwrap_or(RGBColor(0, 0, 0))
}

fn file_name(kind: &str, workload: &str) -> String {
    let w: String = workload
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{kind}-{w}.png")
}

/// One bar: engine label, (cause, WA part) stacked, and the `wchar` WA.
type Bar = (String, Vec<(&'static str, f64)>, Option<f64>);

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws lines (one per engine) on `root`; `log_x` for latency axes.
fn lines(
    root: &Area<'_>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    faint: &[Vec<(f64, f64)>],
    log_x: bool,
) -> DrawResult {
    root.fill(&WHITE)?;
    let text = font_available();
    let pts = series
        .iter()
        .flat_map(|(_, s)| s.iter())
        .chain(faint.iter().flatten());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if log_x {
        x0 = x0.max(0.01);
        x1 = x1.max(x0 * 10.0);
    } else if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    let mut b = ChartBuilder::on(root);
    b.margin(15);
    if text {
        b.caption(title, (FAMILY, 22))
            .x_label_area_size(45)
            .y_label_area_size(80);
    }
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            if text {
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .y_label_formatter(&|y| super::report::human(*y))
                    .label_style((FAMILY, 14))
                    .draw()?;
            } else {
                chart
                    .configure_mesh()
                    .disable_mesh()
                    .x_labels(0)
                    .y_labels(0)
                    .draw()?;
            }
            // Unlabelled, thin and pale, in the colour of the series they go with.
            for (i, s) in faint.iter().enumerate() {
                chart.draw_series(LineSeries::new(
                    s.iter().map(|&(x, y)| (x.max(x0), y)),
                    color(i).mix(0.3).stroke_width(1),
                ))?;
            }
            for (i, (name, s)) in series.iter().enumerate() {
                let c = color(i);
                if s.len() < 3 {
                    // Too few points for a visible line (a phase shorter than two samples).
                    chart.draw_series(
                        s.iter()
                            .map(|&(x, y)| Circle::new((x.max(x0), y), 4, c.filled())),
                    )?;
                }
                let drawn = chart.draw_series(LineSeries::new(
                    s.iter().map(|&(x, y)| (x.max(x0), y)),
                    c.stroke_width(2),
                ))?;
                if text {
                    drawn.label(name.as_str()).legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                }
            }
            if text {
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .label_font((FAMILY, 14))
                    .draw()?;
            }
        }};
    }
    if log_x {
        draw!(b.build_cartesian_2d((x0..x1).log_scale(), 0f64..y1)?);
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0f64..y1)?);
    }
    root.present()?;
    Ok(())
}

/// Stacked bars of write amplification by cause, one bar per engine, plus the `wchar` WA as a
/// black tick on each bar.
fn stacked_wa(root: &Area<'_>, title: &str, bars: &[Bar]) -> DrawResult {
    root.fill(&WHITE)?;
    let text = font_available();
    let top = bars
        .iter()
        .map(|(_, parts, w)| parts.iter().map(|p| p.1).sum::<f64>().max(w.unwrap_or(0.0)))
        .fold(0.0, f64::max)
        .max(0.1)
        * 1.4;
    let n = bars.len().max(1);
    let mut b = ChartBuilder::on(root);
    b.margin(15);
    if text {
        b.caption(title, (FAMILY, 22))
            .x_label_area_size(45)
            .y_label_area_size(60);
    }
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let mut chart = b.build_cartesian_2d(labels[..].into_segmented(), 0f64..top)?;
    // Left and right edges of bar `i` in the segmented (one segment per engine) axis.
    let edges = |i: usize| {
        let left = labels
            .get(i)
            .map_or(SegmentValue::Last, SegmentValue::Exact);
        let right = labels
            .get(i + 1)
            .map_or(SegmentValue::Last, SegmentValue::Exact);
        (left, right)
    };
    if text {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n + 1)
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(l) => l.to_string(),
                _ => String::new(),
            })
            .y_desc("bytes written / user bytes")
            .label_style((FAMILY, 13))
            .draw()?;
    } else {
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .draw()?;
    }
    let causes = ["wal", "flush", "compaction", "metadata", "gc"];
    for (ci, cause) in causes.iter().enumerate() {
        let c = color(ci);
        let rects: Vec<Rectangle<(SegmentValue<&String>, f64)>> = bars
            .iter()
            .enumerate()
            .filter_map(|(i, (_, parts, _))| {
                let below: f64 = parts
                    .iter()
                    .take_while(|p| p.0 != *cause)
                    .map(|p| p.1)
                    .sum();
                let v = parts.iter().find(|p| p.0 == *cause)?.1;
                (v > 0.0).then(|| {
                    let (left, right) = edges(i);
                    let mut r = Rectangle::new([(left, below), (right, below + v)], c.filled());
                    r.set_margin(0, 0, 25, 25);
                    r
                })
            })
            .collect();
        let drawn = chart.draw_series(rects)?;
        if text {
            drawn
                .label(*cause)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
    }
    let ticks: Vec<Rectangle<(SegmentValue<&String>, f64)>> = bars
        .iter()
        .enumerate()
        .filter_map(|(i, (_, _, w))| {
            w.map(|w| {
                let (left, right) = edges(i);
                let mut r = Rectangle::new([(left, w), (right, w)], BLACK.stroke_width(3));
                r.set_margin(0, 0, 10, 10);
                r
            })
        })
        .collect();
    let drawn = chart.draw_series(ticks)?;
    if text {
        drawn
            .label("process wchar")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(3)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font((FAMILY, 14))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn draw_to(path: &Path, f: impl FnOnce(&Area<'_>) -> DrawResult) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    // plotters should report errors, but a panic inside it must not take the results with it.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&root)));
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(anyhow!("drawing {}: {e}", path.display())),
        Err(_) => Err(anyhow!("drawing {} panicked", path.display())),
    }
}

/// Writes every chart into `dir`; returns the files written.
pub fn write_all(dir: &Path, runs: &[RunResult]) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names: Vec<String> = Vec::new();
    for r in runs {
        for w in &r.workloads {
            if !names.contains(&w.name) {
                names.push(w.name.clone());
            }
        }
    }
    let mut files = Vec::new();
    for name in &names {
        let results: Vec<(&str, &super::phase::WorkloadResult)> = runs
            .iter()
            .filter_map(|r| {
                let w = r.workloads.iter().find(|w| &w.name == name)?;
                (w.unsupported.is_none() && w.ops > 0).then_some((r.label.as_str(), w))
            })
            .collect();
        if results.is_empty() {
            continue;
        }
        // The 1-second moving rate, labelled, over each sampling interval's rate, pale: the
        // raw samples of several engines cross too often to read alone. A phase shorter than
        // a second keeps its raw samples as the line.
        let raw: Vec<Vec<(f64, f64)>> = results.iter().map(|(_, w)| rates(&w.samples)).collect();
        let tput: Vec<(String, Vec<(f64, f64)>)> = results
            .iter()
            .zip(&raw)
            .map(|((l, w), r)| {
                let m = moving_rates(&w.samples, 1.0);
                let line = if m.is_empty() { r.clone() } else { m };
                (format!("{l} (1 s)"), line)
            })
            .collect();
        let path = dir.join(file_name("throughput", name));
        draw_to(&path, |a| {
            lines(
                a,
                &format!("{name}: throughput"),
                "seconds",
                "ops/s",
                &tput,
                &raw,
                false,
            )
        })?;
        files.push(path);

        let cdf: Vec<(String, Vec<(f64, f64)>)> = results
            .iter()
            .map(|(l, w)| (l.to_string(), w.latency.cdf()))
            .collect();
        let path = dir.join(file_name("latency-cdf", name));
        draw_to(&path, |a| {
            lines(
                a,
                &format!("{name}: latency CDF"),
                "latency (µs, log)",
                "fraction of ops",
                &cdf,
                &[],
                true,
            )
        })?;
        files.push(path);

        if results.iter().any(|(_, w)| w.writes && w.user_bytes > 0) {
            let bars: Vec<Bar> = results
                .iter()
                .filter(|(_, w)| w.user_bytes > 0)
                .map(|(l, w)| {
                    let user = w.user_bytes as f64;
                    let parts = w
                        .engine_written
                        .as_ref()
                        .map(|e| {
                            e.parts()
                                .iter()
                                .map(|&(c, b)| (c, b as f64 / user))
                                .collect()
                        })
                        .unwrap_or_default();
                    (l.to_string(), parts, w.wchar_write_amplification())
                })
                .collect();
            let path = dir.join(file_name("write-amplification", name));
            draw_to(&path, |a| {
                stacked_wa(a, &format!("{name}: write amplification by cause"), &bars)
            })?;
            files.push(path);
        }
    }
    Ok(files)
}
