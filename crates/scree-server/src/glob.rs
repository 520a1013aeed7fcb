//! Redis's glob patterns (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a-z]`, `\x` escapes; used by
//! `SCAN MATCH` and `CONFIG GET`.

/// Whether `s` matches `pattern` (case-insensitively with `nocase`).
pub fn matches(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    // Bounded recursion: Redis limits nesting of `*` the same way against pathological
    // patterns.
    match_at(pattern, s, nocase, 0)
}

fn eq(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

fn match_at(mut p: &[u8], mut s: &[u8], nocase: bool, depth: u32) -> bool {
    if depth > 1000 {
        return false;
    }
    while let Some((&pc, prest)) = p.split_first() {
        match pc {
            b'*' => {
                // Collapse runs of `*`.
                let mut rest = prest;
                while rest.first() == Some(&b'*') {
                    rest = rest.get(1..).unwrap_or_default();
                }
                if rest.is_empty() {
                    return true;
                }
                for i in 0..=s.len() {
                    if match_at(rest, s.get(i..).unwrap_or_default(), nocase, depth + 1) {
                        return true;
                    }
                }
                return false;
            }
            b'?' => {
                let Some((_, srest)) = s.split_first() else {
                    return false;
                };
                s = srest;
                p = prest;
            }
            b'[' => {
                let Some((&c, srest)) = s.split_first() else {
                    return false;
                };
                let mut q = prest;
                let not = q.first() == Some(&b'^');
                if not {
                    q = q.get(1..).unwrap_or_default();
                }
                let mut hit = false;
                loop {
                    match q {
                        [b'\\', e, rest @ ..] => {
                            hit |= eq(*e, c, nocase);
                            q = rest;
                        }
                        [b']', rest @ ..] => {
                            q = rest;
                            break;
                        }
                        [] => break,
                        [a, b'-', b, rest @ ..] if *b != b']' => {
                            let (lo, hi) = if a <= b { (*a, *b) } else { (*b, *a) };
                            let cc = if nocase { c.to_ascii_lowercase() } else { c };
                            let (lo2, hi2) = if nocase {
                                (lo.to_ascii_lowercase(), hi.to_ascii_lowercase())
                            } else {
                                (lo, hi)
                            };
                            hit |= (lo..=hi).contains(&c) || (lo2..=hi2).contains(&cc);
                            q = rest;
                        }
                        [a, rest @ ..] => {
                            hit |= eq(*a, c, nocase);
                            q = rest;
                        }
                    }
                }
                if hit == not {
                    return false;
                }
                s = srest;
                p = q;
            }
            b'\\' if !prest.is_empty() => {
                let (Some((&c, srest)), Some((&e, prest2))) =
                    (s.split_first(), prest.split_first())
                else {
                    return false;
                };
                if !eq(e, c, nocase) {
                    return false;
                }
                s = srest;
                p = prest2;
            }
            _ => {
                let Some((&c, srest)) = s.split_first() else {
                    return false;
                };
                if !eq(pc, c, nocase) {
                    return false;
                }
                s = srest;
                p = prest;
            }
        }
    }
    s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        let yes = [
            ("*", "anything"),
            ("*", ""),
            ("user:*", "user:1"),
            ("h?llo", "hello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("a\\*b", "a*b"),
            ("*:1*", "x:12"),
            ("**a", "ba"),
        ];
        for (p, s) in yes {
            assert!(matches(p.as_bytes(), s.as_bytes(), false), "{p} ~ {s}");
        }
        let no = [
            ("user:*", "use"),
            ("h?llo", "hllo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("a\\*b", "axb"),
            ("abc", "abcd"),
            ("[", "a"),
        ];
        for (p, s) in no {
            assert!(!matches(p.as_bytes(), s.as_bytes(), false), "{p} !~ {s}");
        }
        assert!(matches(b"SAVE", b"save", true));
        assert!(!matches(b"SAVE", b"save", false));
    }
}
