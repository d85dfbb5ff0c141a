//! The EDIFACT acknowledgement, CONTRL (syntax and service report, D:3): the interchange's
//! envelope mirrored (parties swapped) and one action per interchange (UCI), group (UCF) and
//! message (UCM), with the code of the first error found at each.

use super::{Writer, errors_of, now};
use crate::delimiters::Delimiters;
use crate::error::{EnvelopeError, Level};
use crate::interchange::{Interchange, PartyId};

/// S001 of the CONTRL: the input's syntax identifier (0001) and version (0002), each filled
/// when the input lacks it, since both are mandatory: the identifier at the level the CONTRL
/// is written in (`UNOB` with the level B element separator IS3, `UNOA` otherwise), the
/// version `3`, whose dates (YYMMDD) the CONTRL then carries.
fn syntax(ic: &Interchange) -> [String; 2] {
    let mut parts = ic.version.split(':').map(str::trim);
    let id = match parts.next() {
        Some(id) if !id.is_empty() => id.to_string(),
        _ if ic.delimiters.element == Delimiters::EDIFACT_LEVEL_B.element => "UNOB".to_string(),
        _ => "UNOA".to_string(),
    };
    let version = parts.next().filter(|v| !v.is_empty()).unwrap_or("3").to_string();
    [id, version]
}

/// What the CONTRL of `ic` cannot fill because the input lacks it: the parties of its UNB and
/// UCI, and the interchange control reference its UCI repeats.
pub(super) fn gaps(ic: &Interchange) -> Vec<String> {
    let mut out = Vec::new();
    for (p, element, becomes) in [
        (&ic.sender, "S002 (interchange sender)", "S003 (recipient)"),
        (&ic.receiver, "S003 (interchange recipient)", "S002 (sender)"),
    ] {
        if p.id.is_empty() {
            let uci = element.split(' ').next().unwrap_or(element);
            out.push(format!(
                "the input's UNB {element} has no id: the CONTRL's UNB {becomes} and its UCI \
                 {uci} are empty"
            ));
        }
    }
    if ic.control_number.as_str().is_empty() {
        out.push(
            "the input's UNB 0020 (interchange control reference) is empty: the CONTRL's UCI \
             0020, which repeats it, is empty"
                .to_string(),
        );
    }
    out
}

/// The CONTRL of `ic`: UCI for the interchange, UCF per group, UCM per message.
pub(super) fn contrl(ic: &Interchange, control_number: u64) -> Vec<u8> {
    let d = ic.delimiters;
    let mut w = Writer::new(d);
    if ic.una.is_some() {
        let opt = |b: Option<u8>| b.unwrap_or(b' ');
        let una = [
            b'U',
            b'N',
            b'A',
            d.component,
            d.element,
            d.decimal.unwrap_or(b'.'),
            opt(d.release),
            opt(d.repetition),
            d.terminator()[0],
        ];
        w.out.extend_from_slice(&una);
        w.out.push(b'\n');
    }
    let (date8, hhmm) = now();
    let [id, version] = syntax(ic);
    let date = if version == "4" { date8.clone() } else { date8[2..].to_string() };
    let cn = control_number.to_string();
    let syntax = [id.as_str(), version.as_str()];
    let party = |p: &PartyId| -> Vec<String> {
        if p.qualifier.is_empty() {
            vec![p.id.clone()]
        } else {
            vec![p.id.clone(), p.qualifier.clone()]
        }
    };
    let recv = party(&ic.receiver);
    let send = party(&ic.sender);
    let rv: Vec<&str> = recv.iter().map(String::as_str).collect();
    let sv: Vec<&str> = send.iter().map(String::as_str).collect();
    let test: &[&str] = if ic.test { &["1"] } else { &[] };
    let mut unb: Vec<&[&str]> = vec![&syntax[..], &rv, &sv];
    let dt = [date.as_str(), hhmm.as_str()];
    unb.push(&dt);
    let cnv = [cn.as_str()];
    unb.push(&cnv);
    if ic.test {
        unb.extend([&[][..], &[], &[], &[], &[], test]);
    }
    w.seg("UNB", &unb);
    let start = w.segments;
    w.seg("UNH", &[&["1"], &["CONTRL", "D", "3", "UN"]]);
    let ic_errors: Vec<&EnvelopeError> = errors_of(ic, Level::Interchange, None, None).collect();
    let action = |errs: &[&EnvelopeError]| -> Vec<String> {
        match errs.first() {
            None => vec!["7".into()],
            Some(e) => vec!["4".into(), e.standard_code().to_string()],
        }
    };
    let mut uci = vec![vec![ic.control_number.0.clone()], send.clone(), recv.clone()];
    uci.extend(action(&ic_errors).into_iter().map(|s| vec![s]));
    seg_owned(&mut w, "UCI", &uci);
    for (gi, g) in ic.groups.iter().enumerate() {
        if g.functional_id.is_some() {
            let ge: Vec<&EnvelopeError> = errors_of(ic, Level::Group, Some(gi), None).collect();
            let mut ucf = vec![
                vec![g.control_number.as_ref().map_or(String::new(), |c| c.0.clone())],
                g.application_sender.as_ref().map_or(vec![], party),
                g.application_receiver.as_ref().map_or(vec![], party),
            ];
            ucf.extend(action(&ge).into_iter().map(|s| vec![s]));
            seg_owned(&mut w, "UCF", &ucf);
        }
        for (ti, tx) in g.transactions.iter().enumerate() {
            let te: Vec<&EnvelopeError> =
                errors_of(ic, Level::Transaction, Some(gi), Some(ti)).collect();
            let mut s009 = vec![tx.kind.clone()];
            if let Some(v) = &tx.message_version {
                s009.extend(v.split(':').map(str::to_string));
            }
            let mut ucm = vec![vec![tx.control_number.0.clone()], s009];
            ucm.extend(action(&te).into_iter().map(|s| vec![s]));
            seg_owned(&mut w, "UCM", &ucm);
        }
    }
    let count = (w.segments - start + 1).to_string();
    w.seg("UNT", &[&[&count], &["1"]]);
    w.seg("UNZ", &[&["1"], &[&cn]]);
    w.out
}

fn seg_owned(w: &mut Writer, tag: &str, elements: &[Vec<String>]) {
    let refs: Vec<Vec<&str>> =
        elements.iter().map(|v| v.iter().map(String::as_str).collect()).collect();
    let els: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
    w.seg(tag, &els);
}
