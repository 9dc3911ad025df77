//! `resource.Quantity` as `ParseQuantity` (apimachinery v1.20) builds it from its string: the
//! unexported fields spew prints (`i`, `d`, `s`, `Format`).
//!
//! Both of its forms are rebuilt: the int64 fast path (`i`), and the `inf.Dec` (`d`) it falls
//! back to (large binary suffixes such as `Pi` and `Ei`, more than 18 digits), whose unscaled
//! value is held here in 128 bits; a quantity beyond that is approximated and says so
//! ([`GoQuantity::exact`]).

use serde_json::{Map, Value, json};

/// A quantity's Go fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoQuantity {
    /// `i.value`.
    pub value: i64,
    /// `i.scale` (a power of ten).
    pub scale: i32,
    /// `s`, the cached string (set only when the text parsed is already canonical).
    pub cached: String,
    /// `Format`: `DecimalSI`, `BinarySI` or `DecimalExponent`.
    pub format: &'static str,
    /// `d`: the `inf.Dec` when the fast path did not apply.
    pub dec: Option<Dec>,
    /// Whether these are exactly `ParseQuantity`'s fields.
    pub exact: bool,
}

/// An `inf.Dec`: `±abs × 10^-scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dec {
    /// `unscaled.neg`.
    pub neg: bool,
    /// `unscaled.abs`.
    pub abs: u128,
    /// `scale`.
    pub scale: i32,
}

impl Dec {
    /// The `big.nat` words of `abs`, least significant first (none for zero).
    fn words(&self) -> Vec<u64> {
        #[allow(clippy::cast_possible_truncation)] // splitting into 64-bit words
        let (lo, hi) = (self.abs as u64, (self.abs >> 64) as u64);
        match (lo, hi) {
            (0, 0) => vec![],
            (lo, 0) => vec![lo],
            (lo, hi) => vec![lo, hi],
        }
    }
}

impl GoQuantity {
    /// The zero `Quantity{}` (a quantity field that is absent).
    pub fn zero() -> Self {
        Self { value: 0, scale: 0, cached: String::new(), format: "", dec: None, exact: true }
    }

    /// The fields as the JSON object the printer walks (Go names as keys).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("i".into(), json!({"value": self.value, "scale": self.scale}));
        let dec = self.dec.map(|d| json!({"neg": d.neg, "abs": d.words(), "scale": d.scale}));
        m.insert("d".into(), json!({"Dec": dec}));
        m.insert("s".into(), self.cached.clone().into());
        m.insert("Format".into(), self.format.into());
        m
    }
}

/// `parseQuantityString`'s parts: sign, digits before and after the point (leading zeros of
/// the integer part dropped), suffix.
struct Parts<'a> {
    positive: bool,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

fn split(s: &str) -> Option<Parts<'_>> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < b.len() && b[pos] == b'0' {
        pos += 1;
    }
    if pos == b.len() {
        return Some(Parts { positive, num: "0", denom: "", suffix: "" });
    }
    let start = pos;
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let mut num = &s[start..pos];
    if num.is_empty() {
        num = "0";
    }
    let mut denom = "";
    if pos < b.len() && b[pos] == b'.' {
        pos += 1;
        let d = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[d..pos];
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    (pos == b.len()).then(|| Parts { positive, num, denom, suffix: &s[suffix_start..] })
}

/// `quantitySuffixer.interpret`: base, exponent and format of a suffix.
fn interpret(suffix: &str) -> Option<(u32, i32, &'static str)> {
    let dec = |e| Some((10, e, "DecimalSI"));
    let bin = |e| Some((2, e, "BinarySI"));
    match suffix {
        "" => dec(0),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            let e: i64 = s[1..].parse().ok()?;
            Some((10, i32::try_from(e).ok()?, "DecimalExponent"))
        }
        _ => None,
    }
}

/// The Go fields of `ParseQuantity(s)`; `None` if it does not parse.
pub fn go_fields(s: &str) -> Option<GoQuantity> {
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(GoQuantity { value: 0, scale: 0, cached: s.into(), format: "DecimalSI", dec: None, exact: true });
    }
    let p = split(s)?;
    let (base, exponent, format) = interpret(p.suffix)?;
    let digits = |x: &str| i32::try_from(x.len()).unwrap_or(i32::MAX);
    let (mut scale, precision, mantissa) = match format {
        "BinarySI" if exponent >= 0 && p.denom.is_empty() => {
            // Go: 15 - len(num) - int32(float32(exponent)*3/10) - 1
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)] // as Go converts
            let approx = (exponent as f32 * 3.0 / 10.0) as i32;
            (0, 15 - digits(p.num) - approx - 1, 1i64.checked_shl(u32::try_from(exponent).ok()?).unwrap_or(0))
        }
        "BinarySI" => (0, -1, 1),
        _ => (exponent, 18 - digits(p.num) - digits(p.denom), 1),
    };
    if precision >= 0 {
        scale -= digits(p.denom);
        if scale >= -9 {
            let shifted = format!("{}{}", p.num, p.denom);
            let value: i64 = shifted.parse().ok()?;
            if let Some(result) = value.checked_mul(mantissa).filter(|_| mantissa != 0) {
                let result = if p.positive { result } else { -result };
                let canonical = match format {
                    "BinarySI" => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                };
                let cached = if canonical { s.to_owned() } else { String::new() };
                return Some(GoQuantity { value: result, scale, cached, format, dec: None, exact: true });
            }
        }
    }
    let dec = dec_path(&p, base, exponent, format);
    Some(GoQuantity {
        value: 0,
        scale: 0,
        cached: String::new(),
        format: dec.map_or(format, |(_, f)| f),
        dec: dec.map(|(d, _)| d),
        exact: dec.is_some(),
    })
}

/// `ParseQuantity`'s `inf.Dec` path: the digits scaled by the suffix, rounded up (away from
/// zero) to nano, a binary value capped at MaxInt64 and one under 1 made DecimalSI. `None`
/// when the unscaled value does not fit 128 bits.
fn dec_path(p: &Parts<'_>, base: u32, exponent: i32, mut format: &'static str) -> Option<(Dec, &'static str)> {
    let mut abs: u128 = format!("{}{}", p.num, p.denom).parse().ok()?;
    let mut scale = i32::try_from(p.denom.len()).ok()?;
    if base == 10 {
        scale = scale.checked_sub(exponent)?;
    } else {
        abs = abs.checked_mul(1u128.checked_shl(u32::try_from(exponent).ok()?)?)?;
    }
    if abs != 0 {
        match scale {
            s if s < 9 => abs = abs.checked_mul(10u128.checked_pow(u32::try_from(9 - s).ok()?)?)?,
            s if s > 9 => abs = abs.div_ceil(10u128.checked_pow(u32::try_from(s - 9).ok()?)?),
            _ => {}
        }
        scale = 9;
    }
    let nano = 1_000_000_000u128;
    if format == "BinarySI" {
        let max = u128::from(i64::MAX.unsigned_abs());
        // Compare abs / 10^scale with MaxInt64 (scale is 9 here unless the value is zero).
        if scale == 9 && abs > max * nano {
            (abs, scale) = (max, 0);
        } else if scale == 9 && abs > 0 && abs < nano {
            format = "DecimalSI";
        }
    }
    Some((Dec { neg: !p.positive && abs != 0, abs, scale }, format))
}

/// The value of a quantity as an exact decimal `(mantissa, exponent)` with no trailing zeros in
/// the mantissa (zero is `(0, 0)`), for comparing two spellings (`Quantity.Cmp`); `None` if it
/// does not parse or does not fit.
pub fn exact_value(s: &str) -> Option<(i128, i32)> {
    let p = split(s)?;
    let (base, exponent, _) = interpret(p.suffix)?;
    let mut mantissa: i128 = format!("{}{}", p.num, p.denom).parse().ok()?;
    let mut e10 = -i32::try_from(p.denom.len()).ok()?;
    if base == 2 {
        mantissa = mantissa.checked_mul(1i128.checked_shl(u32::try_from(exponent).ok()?)?)?;
    } else {
        e10 = e10.checked_add(exponent)?;
    }
    if !p.positive {
        mantissa = -mantissa;
    }
    if mantissa == 0 {
        return Some((0, 0));
    }
    while mantissa % 10 == 0 {
        mantissa /= 10;
        e10 += 1;
    }
    Some((mantissa, e10))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> (i64, i32, String, &'static str, bool) {
        let g = go_fields(s).unwrap();
        (g.value, g.scale, g.cached, g.format, g.exact)
    }

    #[test]
    fn canonical_quantities_take_the_fast_path() {
        assert_eq!(q("0"), (0, 0, "0".into(), "DecimalSI", true));
        assert_eq!(q("10m"), (10, -3, "10m".into(), "DecimalSI", true));
        assert_eq!(q("1"), (1, 0, "1".into(), "DecimalSI", true));
        assert_eq!(q("500m"), (500, -3, "500m".into(), "DecimalSI", true));
        assert_eq!(q("1k"), (1, 3, "1k".into(), "DecimalSI", true));
        assert_eq!(q("100M"), (100, 6, "100M".into(), "DecimalSI", true));
        assert_eq!(q("1e3"), (1, 3, "1e3".into(), "DecimalExponent", true));
        // BinarySI caches its string only when the number is not a multiple of 8.
        assert_eq!(q("1Gi"), (1 << 30, 0, "1Gi".into(), "BinarySI", true));
        assert_eq!(q("100Mi"), (100 << 20, 0, "100Mi".into(), "BinarySI", true));
        assert_eq!(q("16Mi"), (16 << 20, 0, String::new(), "BinarySI", true));
        assert_eq!(q("128974848"), (128_974_848, 0, "128974848".into(), "DecimalSI", true));
    }

    #[test]
    fn non_canonical_text_is_not_cached() {
        assert_eq!(q("0.5"), (5, -1, String::new(), "DecimalSI", true));
        assert_eq!(q("1000"), (1000, 0, String::new(), "DecimalSI", true));
        assert_eq!(q("-10m"), (-10, -3, "-10m".into(), "DecimalSI", true));
        assert_eq!(q("0m"), (0, -3, String::new(), "DecimalSI", true));
    }

    #[test]
    fn spellings_of_one_value_compare_equal() {
        assert_eq!(exact_value("1000m"), exact_value("1"));
        assert_eq!(exact_value("1k"), exact_value("1000"));
        assert_eq!(exact_value("1Ki"), exact_value("1024"));
        assert_eq!(exact_value("0.5Gi"), exact_value("512Mi"));
        assert_eq!(exact_value("0"), exact_value("0m"));
        assert_ne!(exact_value("1"), exact_value("1001m"));
        assert_eq!(exact_value("1e3"), exact_value("1k"));
        assert_eq!(exact_value("x"), None);
    }

    #[test]
    fn the_dec_path_keeps_an_inf_dec() {
        let d = |s: &str| go_fields(s).unwrap().dec.map(|d| (d.neg, d.abs, d.scale));
        // 3 × 2^60 at nano scale: [0 187500000] as Go's 64-bit words.
        assert_eq!(d("3Ei"), Some((false, 3_458_764_513_820_540_928 * 1_000_000_000, 9)));
        assert_eq!(go_fields("3Ei").unwrap().dec.unwrap().words(), [0, 187_500_000]);
        assert_eq!(d("9Ei"), Some((false, u128::from(i64::MAX.unsigned_abs()), 0)), "capped at MaxInt64");
        assert_eq!(d("1.5Gi"), Some((false, 1_610_612_736_000_000_000, 9)));
        assert_eq!(d("-1234567890123456789012"), Some((true, 1_234_567_890_123_456_789_012_000_000_000, 9)));
        assert!(go_fields("1.5Gi").unwrap().exact);
        assert_eq!(d("10m"), None, "the fast path has no Dec");
    }

    #[test]
    fn garbage_is_none() {
        for bad in ["", "abc", "1Zi", "1.2.3", "--1", "1n5"] {
            assert!(go_fields(bad).is_none(), "{bad}");
        }
    }
}
