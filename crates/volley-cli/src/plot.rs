//! `volley plot`: the seeds' figures for today's machines. Latency against message size and
//! throughput against message size, log axes, one labelled curve per run and transport, from
//! `volley bench --json` files and NetPIPE np.out files (`FILE=LABEL` names a NetPIPE curve).

use crate::bench::results::{self, Results, Series};
use clap::Args;
use plotters::prelude::*;

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// Result files: volley JSON, or NetPIPE np.out as FILE or FILE=LABEL.
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Output file: .svg or .png.
    #[arg(short, long)]
    pub output: String,
    /// Title above the figure.
    #[arg(long)]
    pub title: Option<String>,
}

/// Loads the curves of one input.
pub fn load(spec: &str) -> Result<Vec<Series>, String> {
    let (path, label) = match spec.split_once('=') {
        Some((p, l)) => (p, Some(l)),
        None => (spec, None),
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    if text.trim_start().starts_with('{') {
        let r: Results = serde_json::from_str(&text)
            .map_err(|e| format!("{path}: not a volley result file: {e}"))?;
        if r.format != results::FORMAT {
            return Err(format!(
                "{path}: format {:?}, this volley reads {:?}",
                r.format,
                results::FORMAT
            ));
        }
        Ok(r.series
            .into_iter()
            .map(|mut s| {
                if let Some(l) = label {
                    s.label = format!("{l} {}", s.transport);
                }
                s
            })
            .collect())
    } else {
        let stem = std::path::Path::new(path)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("netpipe");
        let label = label.unwrap_or(stem);
        results::parse_netpipe(&text, label, "netpipe")
            .map(|s| vec![s])
            .map_err(|e| format!("{path}: not a volley JSON or NetPIPE file: {e}"))
    }
}

fn register_font() -> Result<(), String> {
    const CANDIDATES: &[&str] = &[
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    ];
    let path = CANDIDATES
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or("no DejaVu Sans font found for the labels; install it (Debian: apt-get install fonts-dejavu-core)")?;
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    // plotters keeps the font for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{path}: not a usable font"))
}

type Panel<'a, DB> = DrawingArea<DB, plotters::coord::Shift>;

fn draw_panel<DB: DrawingBackend>(
    area: &Panel<'_, DB>,
    series: &[Series],
    caption: &str,
    y_desc: &str,
    value: impl Fn(&results::Point) -> f64,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|p| p.bytes > 0)
                .map(|p| (p.bytes as f64, value(p)))
                .filter(|(_, y)| *y > 0.0 && y.is_finite())
                .collect()
        })
        .collect();
    let all: Vec<&(f64, f64)> = pts.iter().flatten().collect();
    if all.is_empty() {
        return Err(format!(
            "{caption}: no positive values to plot (sizes of 0 bytes cannot go on a log axis)"
        ));
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if x1 <= x0 {
        x1 = x0 * 2.0;
    }
    let (y0, y1) = (y0 / 1.5, y1 * 1.5);
    let e = |e: plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| human(*v))
        .y_label_formatter(&|v| format!("{v}"))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    for (i, (s, p)) in series.iter().zip(&pts).enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(p.iter().copied(), color.stroke_width(2)))
            .map_err(e)?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                p.iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(e)?;
    Ok(())
}

/// Tick labels of the size axis: the ticks of a log axis sit at powers of ten, so decimal units.
fn human(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{}G", v / 1e9),
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    series: &[Series],
    title: &str,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(title, ("sans-serif", 26))
        .map_err(|e| e.to_string())?;
    let (l, r) = root.split_horizontally(root.dim_in_pixel().0 / 2);
    draw_panel(&l, series, "Latency", "time (µs)", |p| p.time_us.median)?;
    draw_panel(
        &r,
        series,
        "Throughput",
        "MB/s (10^6 bytes per second)",
        |p| p.mbytes_per_s,
    )?;
    root.present().map_err(|e| e.to_string())
}

pub fn plot(a: PlotArgs) -> i32 {
    match plot_inner(&a) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("volley plot: {e}");
            1
        }
    }
}

fn plot_inner(a: &PlotArgs) -> Result<(), String> {
    let mut series = Vec::new();
    for f in &a.files {
        series.extend(load(f)?);
    }
    register_font()?;
    let title = a.title.clone().unwrap_or_else(|| "volley bench".into());
    let size = (1400, 560);
    if a.output.ends_with(".svg") {
        draw(
            SVGBackend::new(&a.output, size).into_drawing_area(),
            &series,
            &title,
        )
    } else if a.output.ends_with(".png") {
        draw(
            BitMapBackend::new(&a.output, size).into_drawing_area(),
            &series,
            &title,
        )
    } else {
        Err(format!("{}: the output must end in .svg or .png", a.output))
    }
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// NetPIPE np.out file.
    pub file: String,
    /// Label of the curve, e.g. "NetPIPE Open MPI".
    #[arg(long)]
    pub label: String,
    /// Transport name, e.g. "openmpi-vader".
    #[arg(long, default_value = "netpipe")]
    pub transport: String,
    /// Where to write the volley JSON ("-" for standard output).
    #[arg(short, long, default_value = "-")]
    pub output: String,
}

/// `volley import-netpipe`: NetPIPE's output as a volley result file (a ping-pong test).
pub fn import_netpipe(a: ImportArgs) -> i32 {
    let r = (|| -> Result<(), String> {
        let text = std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file))?;
        let s = results::parse_netpipe(&text, &a.label, &a.transport)
            .map_err(|e| format!("{}: {e}", a.file))?;
        let sizes = s.points.iter().map(|p| p.bytes).collect();
        let mut r = Results::new(
            "pingpong",
            &crate::bench::BenchArgs::default_for("pingpong"),
            sizes,
            Default::default(),
            vec![s],
        );
        r.options
            .insert("source".into(), format!("NetPIPE np.out {}", a.file));
        let json = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
        if a.output == "-" {
            println!("{json}");
        } else {
            std::fs::write(&a.output, json + "\n").map_err(|e| format!("{}: {e}", a.output))?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("volley import-netpipe: {e}");
            1
        }
    }
}
