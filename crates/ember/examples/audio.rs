//! A sound clip for TensorBoard's audio dashboard: a one-second tone sweeping 220 Hz to
//! 1760 Hz, recorded with `SummaryRecord::add_audio`, then read back from the event file and
//! checked sample by sample against the 16-bit PCM the format promises (`docs/formats.md`).
//! Needs no Burn: `cargo run -p ember --no-default-features --example audio [-- <log dir>]`.

use std::path::{Path, PathBuf};

use ember::SummaryRecord;
use ember::pack::pcm16_sample;
use ember::pack::proto::tensorboard::{Event, event::What, summary::value::Value};
use ember::read::RecordReader;
use prost::Message;

const RATE: u32 = 16_000;
const TAG: &str = "audio/sweep";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let log_dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "runs/audio-example".into()),
    );
    let samples = sweep(220.0, 1760.0, RATE);
    let mut summary = SummaryRecord::new(&log_dir)?;
    summary.add_audio(TAG, &samples, RATE, 0)?;
    summary.close()?;

    let wav = read_clip(&log_dir)?;
    let (rate, pcm) = parse_wav(&wav)?;
    if rate != RATE {
        return Err(format!("read back {rate} Hz, wrote {RATE} Hz").into());
    }
    let expected: Vec<i16> = samples.iter().map(|&x| pcm16_sample(x)).collect();
    if pcm != expected {
        return Err(format!(
            "read back {} samples that differ from the {} written",
            pcm.len(),
            expected.len()
        )
        .into());
    }
    println!(
        "wrote and read back {} samples of {TAG} under {}; hear them with: tensorboard --logdir {}",
        pcm.len(),
        log_dir.display(),
        log_dir.display()
    );
    Ok(())
}

/// One second of a sine whose frequency rises linearly from `from` to `to` Hz, at 0.8 of full
/// scale: the phase is the integral of the frequency, `2π(from·t + (to − from)·t²/2)`.
fn sweep(from: f32, to: f32, rate: u32) -> Vec<f32> {
    (0..rate)
        .map(|i| {
            let t = i as f32 / rate as f32;
            let phase = 2.0 * std::f32::consts::PI * (from * t + (to - from) * t * t / 2.0);
            0.8 * phase.sin()
        })
        .collect()
}

/// The WAV bytes of the first `TAG` value in the run's event file.
fn read_clip(log_dir: &Path) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    for entry in std::fs::read_dir(log_dir)? {
        let path = entry?.path();
        if !path.to_string_lossy().contains("tfevents") {
            continue;
        }
        for record in RecordReader::open(&path)? {
            let event = Event::decode(record?.data.as_slice())?;
            let Some(What::Summary(summary)) = event.what else {
                continue;
            };
            for value in summary.value {
                // The audio plugin's [k, 2] string tensor: (clip, label) rows.
                if let (true, Some(Value::Tensor(t))) = (value.tag == TAG, value.value)
                    && let Some(wav) = t.string_val.into_iter().next()
                {
                    return Ok(wav);
                }
            }
        }
    }
    Err(format!("no {TAG} clip under {}", log_dir.display()).into())
}

/// The sample rate and samples of a mono 16-bit PCM WAV file (the 44-byte canonical header).
fn parse_wav(wav: &[u8]) -> Result<(u32, Vec<i16>), Box<dyn std::error::Error>> {
    let u16_at = |i: usize| u16::from_le_bytes([wav[i], wav[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes([wav[i], wav[i + 1], wav[i + 2], wav[i + 3]]);
    if wav.len() < 44 || &wav[0..4] != b"RIFF" || &wav[8..12] != b"WAVE" || &wav[36..40] != b"data"
    {
        return Err("not a canonical wav file".into());
    }
    let (format, channels, bits) = (u16_at(20), u16_at(22), u16_at(34));
    if (format, channels, bits) != (1, 1, 16) {
        return Err(format!("wav format {format}, {channels} channel(s), {bits} bits").into());
    }
    let len = u32_at(40) as usize;
    let data = wav.get(44..44 + len).ok_or("wav data cut short")?;
    let pcm = data
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    Ok((u32_at(24), pcm))
}
