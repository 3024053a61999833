//! Aligned plain-text tables for the terminal, the one layout every console table of the
//! harness uses: the first columns (names) left-aligned, the figures right-aligned, two spaces
//! between columns, a rule of dashes under the header. Markdown tables go to files
//! (`README.md`); a terminal gets these, which stay within [`WIDTH`] when their columns are
//! chosen for it.

use std::fmt::Write as _;

/// The terminal width the console tables keep within by default.
pub const WIDTH: usize = 120;

/// `rows` under `headers`, the first `left` columns left-aligned and the rest right-aligned.
pub fn render(headers: &[&str], left: usize, rows: &[Vec<String>]) -> String {
    let widths = widths(headers, rows);
    let mut out = String::new();
    let line = |cells: &mut dyn Iterator<Item = &str>, out: &mut String| {
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            let sep = if i == 0 { "" } else { "  " };
            if i < left {
                let _ = write!(out, "{sep}{cell:<w$}");
            } else {
                let _ = write!(out, "{sep}{cell:>w$}");
            }
        }
        // A left-aligned last column would leave trailing spaces.
        out.truncate(out.trim_end_matches(' ').len());
        out.push('\n');
    };
    line(&mut headers.iter().copied(), &mut out);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut rule.iter().map(String::as_str), &mut out);
    for r in rows {
        line(&mut r.iter().map(String::as_str), &mut out);
    }
    out
}

/// The printed width of [`render`]'s table: its widest column cells, two spaces between.
pub fn width(headers: &[&str], rows: &[Vec<String>]) -> usize {
    let w = widths(headers, rows);
    w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1)
}

fn widths(headers: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    (0..headers.len())
        .map(|i| {
            let cells = rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count());
            cells.fold(headers[i].chars().count(), usize::max)
        })
        .collect()
}

/// `text` broken at spaces into lines of at most `width` characters (a longer word keeps its
/// own line), each ending in a newline.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The widest line of `text`, in characters.
pub fn widest_line(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_left_figures_right_two_spaces_between() {
        let rows =
            vec![vec!["queue".to_string(), "1.5".into()], vec!["lwt".into(), "12.25".into()]];
        let t = render(&["algorithm", "p50 ms"], 1, &rows);
        assert_eq!(
            t,
            "algorithm  p50 ms\n---------  ------\nqueue         1.5\nlwt         12.25\n"
        );
        assert_eq!(width(&["algorithm", "p50 ms"], &rows), widest_line(&t));
    }

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        assert_eq!(wrap("aa bb cc", 5), "aa bb\ncc\n");
        assert_eq!(wrap("abcdefg h", 3), "abcdefg\nh\n");
        assert_eq!(wrap("", 3), "");
    }
}
