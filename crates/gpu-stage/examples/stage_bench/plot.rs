//! The bench's plots: a small self-contained SVG line chart (no plotting library needed). Kept in
//! the example, not the library: nothing but the bench draws charts.

/// One line of a plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (x label, y value) points, in x order.
    pub points: Vec<(String, f64)>,
}

/// A small self-contained SVG line chart (no plotting library needed): categorical x axis,
/// one polyline per series, dashed horizontal reference lines.
pub fn line_chart_svg(
    title: &str,
    x_title: &str,
    y_title: &str,
    series: &[Series],
    references: &[(String, f64)],
) -> String {
    const W: f64 = 760.0;
    const H: f64 = 460.0;
    const L: f64 = 70.0;
    const R: f64 = 210.0;
    const T: f64 = 50.0;
    const B: f64 = 60.0;
    const COLORS: [&str; 8] = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    ];
    let xs: Vec<String> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0.clone()))
        .fold(Vec::new(), |mut acc, x| {
            if !acc.contains(&x) {
                acc.push(x);
            }
            acc
        });
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(references.iter().map(|r| r.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let pw = W - L - R;
    let ph = H - T - B;
    let xpos = |i: usize| {
        L + if xs.len() > 1 {
            pw * i as f64 / (xs.len() - 1) as f64
        } else {
            pw / 2.0
        }
    };
    let ypos = |v: f64| T + ph * (1.0 - v / ymax);
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut o = String::new();
    o.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    ));
    o.push_str(&format!(
        "<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n"
    ));
    o.push_str(&format!(
        "<text x=\"{}\" y=\"25\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        L + pw / 2.0,
        esc(title)
    ));
    // Grid and y ticks.
    let step = [1.0, 2.0, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0]
        .into_iter()
        .find(|s| ymax / s <= 10.0)
        .unwrap_or(200.0);
    let mut v = 0.0;
    while v <= ymax {
        let y = ypos(v);
        o.push_str(&format!(
            "<line x1=\"{L}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>\n",
            L + pw,
            L - 6.0,
            y + 4.0
        ));
        v += step;
    }
    for (i, x) in xs.iter().enumerate() {
        o.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            xpos(i),
            T + ph + 18.0,
            esc(x)
        ));
    }
    o.push_str(&format!(
        "<line x1=\"{L}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n<line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{:.1}\" stroke=\"black\"/>\n",
        T + ph,
        L + pw,
        T + ph,
        T + ph
    ));
    o.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
        L + pw / 2.0,
        H - 15.0,
        esc(x_title)
    ));
    o.push_str(&format!(
        "<text transform=\"translate(18,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        T + ph / 2.0,
        esc(y_title)
    ));
    let mut legend_y = T + 10.0;
    for (label, value) in references {
        let y = ypos(*value);
        o.push_str(&format!(
            "<line x1=\"{L}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#555\" stroke-dasharray=\"6,4\"/>\n",
            L + pw
        ));
        o.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"{legend_y:.1}\" x2=\"{:.1}\" y2=\"{legend_y:.1}\" stroke=\"#555\" stroke-dasharray=\"6,4\"/>\n<text x=\"{:.1}\" y=\"{:.1}\">{} ({value:.1})</text>\n",
            L + pw + 12.0,
            L + pw + 36.0,
            L + pw + 42.0,
            legend_y + 4.0,
            esc(label)
        ));
        legend_y += 18.0;
    }
    for (si, s) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .filter_map(|(x, y)| {
                xs.iter()
                    .position(|v| v == x)
                    .map(|i| format!("{:.1},{:.1}", xpos(i), ypos(*y)))
            })
            .collect();
        o.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        ));
        for p in &pts {
            let mut it = p.split(',');
            if let (Some(x), Some(y)) = (it.next(), it.next()) {
                o.push_str(&format!(
                    "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{color}\"/>\n"
                ));
            }
        }
        o.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"{legend_y:.1}\" x2=\"{:.1}\" y2=\"{legend_y:.1}\" stroke=\"{color}\" stroke-width=\"2\"/>\n<text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            L + pw + 12.0,
            L + pw + 36.0,
            L + pw + 42.0,
            legend_y + 4.0,
            esc(&s.label)
        ));
        legend_y += 18.0;
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_series_and_references() {
        let svg = line_chart_svg(
            "t",
            "chunk",
            "GiB/s",
            &[Series {
                label: "8 slots".into(),
                points: vec![("1 MiB".into(), 10.0), ("4 MiB".into(), 20.0)],
            }],
            &[("pinned D2H".into(), 25.0)],
        );
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("8 slots") && svg.contains("pinned D2H (25.0)"));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }
}
