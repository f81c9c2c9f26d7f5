//! Byte-level readers for the hand-written JSON fast paths (the journal's envelope prefix, the
//! Team crate's one-pass line decoder). Each reads one token at a byte index of a line and
//! returns `None` for anything it does not read plainly, so the caller falls back to a full
//! `serde_json` parse; none of them allocates.

/// The index of the first byte at or after `at` that is not JSON whitespace (space, tab, CR,
/// LF); `line.len()` when there is none.
#[inline]
pub fn skip_ws(line: &[u8], mut at: usize) -> usize {
    while matches!(line.get(at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        at += 1;
    }
    at
}

/// A plain non-negative JSON integer at `at` that fits `u64` (no sign, fraction, exponent or
/// leading zero), and the index after its last digit. `None` for anything else (including
/// `1.0`, `1e3` and values over `u64::MAX`).
#[inline]
pub fn read_u64(line: &[u8], at: usize) -> Option<(u64, usize)> {
    let rest = line.get(at..)?;
    let digits = digit_run(rest);
    // Up to 19 digits cannot overflow; 20 may; more always do.
    if digits == 0 || digits > 20 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let value = if digits < 20 {
        rest[..digits]
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'))
    } else {
        rest[..digits].iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?
    };
    Some((value, at + digits))
}

/// The number of ASCII digits `bytes` starts with, eight at a time.
#[inline]
fn digit_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    let mut n = 0;
    while let Some(chunk) = bytes.get(n..n + 8) {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        // Per byte: below `0` borrows, above `9` carries into the high bit; a borrow or carry
        // can only reach bytes above the first non-digit, so the lowest flagged byte is exact.
        let flagged = (word.wrapping_sub(ONES * u64::from(b'0')) | word.wrapping_add(ONES * 0x46))
            & (ONES << 7);
        if flagged != 0 {
            return n + (flagged.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    while bytes.get(n).is_some_and(u8::is_ascii_digit) {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_plainly_or_refused() {
        assert_eq!(read_u64(b"0,", 0), Some((0, 1)));
        assert_eq!(read_u64(b"x 123456789012}", 2), Some((123_456_789_012, 14)));
        assert_eq!(read_u64(b"18446744073709551615", 0), Some((u64::MAX, 20)));
        for bad in [
            &b"18446744073709551616"[..],
            b"01",
            b"1.0",
            b"1e3",
            b"-1",
            b"",
            b"x",
        ] {
            assert_eq!(read_u64(bad, 0), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(skip_ws(b" \t\r\n1", 0), 4);
        assert_eq!(skip_ws(b"  ", 0), 2);
    }
}
