//! Did-you-mean: the closest known name to a misspelt field, kind or rule.

/// The closest known name to a misspelt one (edit distance ≤ 2, or equal ignoring case).
pub fn suggest<'k>(unknown: &str, known: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    let mut best: Option<(usize, &str)> = None;
    for k in known {
        let d = if k.eq_ignore_ascii_case(unknown) {
            0
        } else {
            edit_distance(unknown, k)
        };
        if d <= 2 && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent swaps
/// (`hostNetwrok` → `hostNetwork` is one edit).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposition_is_close() {
        assert_eq!(
            suggest("hostNetwrok", ["hostNetwork", "hostPID"].into_iter()),
            Some("hostNetwork")
        );
        assert_eq!(suggest("zzz", ["hostNetwork"].into_iter()), None);
    }
}
