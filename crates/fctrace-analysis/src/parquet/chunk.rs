//! Column chunks encoded in memory, written into the file from their pages
//! when their row group closes ([`super::footer::File`]): a row group can
//! be large (few of them: the file's footer stays small) while only its
//! encoded, compressed pages are held.
//!
//! - [`KeyColumn`]: a column whose rows are keys into values fctrace
//!   already holds (a function's index: its name, symbol or module; a
//!   task's; a depth), written with Parquet's dictionary encoding: the
//!   chunk's dictionary is the keys met in it, found by indexing an array
//!   by key, where a generic writer hashes every row's value.
//! - [`TimeColumn`]: times, DELTA_BINARY_PACKED ([`delta`]).
//! - [`TextColumn`]: arguments and return values as text, zstd.
//!
//! The parquet crate writes the pages' headers; fctrace the row groups
//! and the footer ([`super::footer`]). The crate's column writer is not
//! used for calls.parquet: it hashes every value of a dictionary column
//! and keeps a compressor per column.

use super::footer::{self, codec, encoding, Bounds, ChunkMeta, ChunkStats};
use super::{delta, rle};
use bytes::Bytes;
use parquet::basic::{Compression, Encoding, PageType, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriteSpec, PageWriter};
use parquet::errors::Result;
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;
use std::io::Write;

/// The zstd level of every page (fast).
pub const ZSTD_LEVEL: i32 = 1;

pub fn compression() -> Compression {
    Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).expect("a valid level"))
}

/// Values per data page of a [`KeyColumn`] (its indices held until then:
/// 64 KiB).
const PAGE_VALUES: usize = 16_384;

/// A value of a [`KeyColumn`]'s dictionary, for its dictionary page.
pub enum Plain<'a> {
    Int(i32),
    Str(&'a str),
}

/// Required columns whose rows are the same keys (small, dense integers),
/// each with its own value per key: dictionary-encoded, with one
/// dictionary order, so their data pages are the same bytes, encoded and
/// compressed once (the task column gives task, pid and tid; the function
/// index name, symbol and module).
pub struct KeyColumn {
    /// Per key its index in the chunk's dictionary plus one (0: not in it).
    slot: Vec<u32>,
    /// The chunk's dictionary: keys in the order they were first met.
    keys: Vec<u32>,
    /// The current page's dictionary indices.
    page: Vec<u32>,
    /// The chunk's data pages so far: compressed bytes, size before
    /// compression, values.
    pages: Vec<(Bytes, usize, u32)>,
    pages_bytes: usize,
    rows: u64,
    /// The page being encoded, before compression.
    scratch: Vec<u8>,
}

impl KeyColumn {
    pub fn new() -> KeyColumn {
        KeyColumn {
            slot: Vec::new(),
            keys: Vec::new(),
            page: Vec::with_capacity(PAGE_VALUES),
            pages: Vec::new(),
            pages_bytes: 0,
            rows: 0,
            scratch: Vec::new(),
        }
    }

    #[inline]
    pub fn push(&mut self, key: u32, z: &mut zstd::bulk::Compressor<'_>) -> Result<()> {
        let k = key as usize;
        if k >= self.slot.len() {
            self.slot.resize(k + 1, 0);
        }
        let mut index = self.slot[k];
        if index == 0 {
            self.keys.push(key);
            index = self.keys.len() as u32;
            self.slot[k] = index;
        }
        self.page.push(index - 1);
        self.rows += 1;
        if self.page.len() == PAGE_VALUES {
            self.end_page(z)?;
        }
        Ok(())
    }

    /// The chunks' bytes held so far.
    pub fn held_bytes(&self) -> usize {
        self.pages_bytes + self.page.len() * 4
    }

    fn end_page(&mut self, z: &mut zstd::bulk::Compressor<'_>) -> Result<()> {
        if self.page.is_empty() {
            return Ok(());
        }
        let width = rle::bit_width(self.keys.len() as u32 - 1);
        self.scratch.clear();
        self.scratch.push(width);
        rle::encode(&self.page, width, &mut self.scratch);
        let buf = compress(z, &self.scratch)?;
        self.pages_bytes += buf.len();
        self.pages
            .push((buf, self.scratch.len(), self.page.len() as u32));
        self.page.clear();
        Ok(())
    }

    /// Writes per column its chunk (dictionary page, then data pages) into
    /// `file`, `values` giving each column's value of a key; the columns
    /// start new chunks. The chunks' statistics are the bounds of
    /// integers (none for strings).
    pub fn close<'v, W: Write + Send>(
        &mut self,
        z: &mut zstd::bulk::Compressor<'_>,
        values: &[&dyn Fn(u32) -> Plain<'v>],
        file: &mut footer::File<W>,
    ) -> Result<()> {
        self.end_page(z)?;
        for value in values {
            self.scratch.clear();
            let mut bounds: Option<(i32, i32)> = None;
            for &k in &self.keys {
                match value(k) {
                    Plain::Int(v) => {
                        self.scratch.extend_from_slice(&v.to_le_bytes());
                        bounds = Some(bounds.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                    }
                    Plain::Str(s) => {
                        self.scratch
                            .extend_from_slice(&(s.len() as u32).to_le_bytes());
                        self.scratch.extend_from_slice(s.as_bytes());
                    }
                }
            }
            let dictionary = Page::DictionaryPage {
                buf: compress(z, &self.scratch)?,
                num_values: self.keys.len() as u32,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            };
            let data = self.pages.iter().map(|(buf, size, values)| {
                let page = Page::DataPage {
                    buf: buf.clone(),
                    num_values: *values,
                    encoding: Encoding::RLE_DICTIONARY,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                };
                CompressedPage::new(page, *size)
            });
            let pages =
                std::iter::once(CompressedPage::new(dictionary, self.scratch.len())).chain(data);
            write_chunk(
                file,
                pages,
                self.rows,
                codec::ZSTD,
                &[encoding::PLAIN, encoding::RLE, encoding::RLE_DICTIONARY],
                bounds.map(|(lo, hi)| ChunkStats {
                    bounds: Some(Bounds::I32(lo, hi)),
                    nulls: 0,
                }),
            )?;
        }
        for &k in &self.keys {
            self.slot[k as usize] = 0;
        }
        self.keys.clear();
        self.pages.clear();
        self.pages_bytes = 0;
        self.rows = 0;
        Ok(())
    }
}

fn compress(z: &mut zstd::bulk::Compressor<'_>, data: &[u8]) -> Result<Bytes> {
    Ok(Bytes::from(z.compress(data)?))
}

/// Bytes of text per page at most (before compression).
const PAGE_BYTES: usize = 256 << 10;

/// An optional string column (arguments, return values): PLAIN pages
/// compressed with zstd.
pub struct TextColumn {
    /// The current page's definition levels (1: a value, 0: null) and its
    /// values, PLAIN-encoded (length, bytes).
    defs: Vec<u32>,
    plain: Vec<u8>,
    pages: Vec<CompressedPage>,
    pages_bytes: usize,
    rows: u64,
    scratch: Vec<u8>,
}

impl TextColumn {
    pub fn new() -> TextColumn {
        TextColumn {
            defs: Vec::new(),
            plain: Vec::new(),
            pages: Vec::new(),
            pages_bytes: 0,
            rows: 0,
            scratch: Vec::new(),
        }
    }

    pub fn push(&mut self, v: Option<&[u8]>, z: &mut zstd::bulk::Compressor<'_>) -> Result<()> {
        self.defs.push(u32::from(v.is_some()));
        if let Some(v) = v {
            self.plain
                .extend_from_slice(&(v.len() as u32).to_le_bytes());
            self.plain.extend_from_slice(v);
        }
        self.rows += 1;
        if self.defs.len() == PAGE_VALUES || self.plain.len() >= PAGE_BYTES {
            self.end_page(z)?;
        }
        Ok(())
    }

    /// `n` null rows (a run of calls without this text: most of them).
    pub fn push_nulls(&mut self, mut n: usize, z: &mut zstd::bulk::Compressor<'_>) -> Result<()> {
        while n > 0 {
            let k = n.min(PAGE_VALUES - self.defs.len());
            self.defs.resize(self.defs.len() + k, 0);
            self.rows += k as u64;
            n -= k;
            if self.defs.len() == PAGE_VALUES {
                self.end_page(z)?;
            }
        }
        Ok(())
    }

    fn end_page(&mut self, z: &mut zstd::bulk::Compressor<'_>) -> Result<()> {
        if self.defs.is_empty() {
            return Ok(());
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&[0; 4]);
        rle::encode(&self.defs, 1, &mut self.scratch);
        let len = (self.scratch.len() - 4) as u32;
        self.scratch[..4].copy_from_slice(&len.to_le_bytes());
        self.scratch.extend_from_slice(&self.plain);
        let page = Page::DataPage {
            buf: compress(z, &self.scratch)?,
            num_values: self.defs.len() as u32,
            encoding: Encoding::PLAIN,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        self.pages_bytes += page.buffer().len();
        self.pages
            .push(CompressedPage::new(page, self.scratch.len()));
        self.defs.clear();
        self.plain.clear();
        Ok(())
    }

    pub fn held_bytes(&self) -> usize {
        self.pages_bytes + self.plain.len() + self.defs.len() * 4
    }

    /// Writes the chunk into `file`; the column starts a new chunk.
    pub fn close<W: Write + Send>(
        &mut self,
        z: &mut zstd::bulk::Compressor<'_>,
        file: &mut footer::File<W>,
    ) -> Result<()> {
        self.end_page(z)?;
        write_chunk(
            file,
            self.pages.drain(..),
            self.rows,
            codec::ZSTD,
            &[encoding::RLE, encoding::PLAIN],
            None,
        )?;
        self.pages_bytes = 0;
        self.rows = 0;
        Ok(())
    }
}

/// Writes a chunk of `pages` (a dictionary page first, if any) into
/// `file`, straight from the pages held (no copy of the chunk is made).
fn write_chunk<W: Write + Send>(
    file: &mut footer::File<W>,
    pages: impl Iterator<Item = CompressedPage>,
    rows: u64,
    codec: i32,
    encodings: &'static [i32],
    stats: Option<ChunkStats>,
) -> Result<()> {
    let mut sink = TrackedWrite::new(file.out());
    let mut specs: Vec<PageWriteSpec> = Vec::new();
    {
        let mut writer = SerializedPageWriter::new(&mut sink);
        for page in pages {
            specs.push(writer.write_page(page)?);
        }
    }
    let len = sink.bytes_written() as u64;
    // Flushed into the file's writer.
    sink.into_inner()?;
    let data_offset = specs
        .iter()
        .find(|s| s.page_type != PageType::DICTIONARY_PAGE)
        .map_or(0, |s| s.offset as i64);
    let dictionary_offset = specs
        .first()
        .filter(|s| s.page_type == PageType::DICTIONARY_PAGE)
        .map(|s| s.offset as i64);
    let meta = ChunkMeta {
        codec,
        encodings,
        num_values: rows,
        compressed: specs.iter().map(|s| s.compressed_size as i64).sum(),
        uncompressed: specs.iter().map(|s| s.uncompressed_size as i64).sum(),
        data_offset,
        dictionary_offset,
        stats,
    };
    file.chunk_written(len, &meta);
    Ok(())
}

/// An int64 column (optional or not) of times: DELTA_BINARY_PACKED pages
/// written by fctrace ([`delta`]), not compressed (the packed deltas are
/// what a compressor would find), with the chunk's bounds as statistics.
pub struct TimeColumn {
    optional: bool,
    /// The current page's values (nulls left out) and, for an optional
    /// column, per row 1 (a value) or 0.
    values: Vec<i64>,
    defs: Vec<u32>,
    rows_in_page: usize,
    pages: Vec<CompressedPage>,
    pages_bytes: usize,
    rows: u64,
    nulls: u64,
    /// The chunk's smallest and largest values (MAX and MIN: none yet).
    low: i64,
    high: i64,
    scratch: Vec<u8>,
}

impl TimeColumn {
    pub fn new(descr: ColumnDescPtr) -> TimeColumn {
        TimeColumn {
            optional: descr.max_def_level() > 0,
            values: Vec::with_capacity(PAGE_VALUES),
            defs: Vec::new(),
            rows_in_page: 0,
            pages: Vec::new(),
            pages_bytes: 0,
            rows: 0,
            nulls: 0,
            low: i64::MAX,
            high: i64::MIN,
            scratch: Vec::new(),
        }
    }

    /// A row's value (None: null, in an optional column).
    #[inline]
    pub fn push(&mut self, v: Option<i64>) {
        if self.optional {
            self.defs.push(u32::from(v.is_some()));
        }
        match v {
            Some(v) => {
                self.values.push(v);
                self.low = self.low.min(v);
                self.high = self.high.max(v);
            }
            None => self.nulls += 1,
        }
        self.rows_in_page += 1;
        self.rows += 1;
        if self.rows_in_page == PAGE_VALUES {
            self.end_page();
        }
    }

    fn end_page(&mut self) {
        if self.rows_in_page == 0 {
            return;
        }
        self.scratch.clear();
        if self.optional {
            // Definition levels: their length, then RLE/bit-packed (1 bit).
            self.scratch.extend_from_slice(&[0; 4]);
            rle::encode(&self.defs, 1, &mut self.scratch);
            let len = (self.scratch.len() - 4) as u32;
            self.scratch[..4].copy_from_slice(&len.to_le_bytes());
        }
        delta::encode(&self.values, &mut self.scratch);
        let page = Page::DataPage {
            buf: Bytes::copy_from_slice(&self.scratch),
            num_values: self.rows_in_page as u32,
            encoding: Encoding::DELTA_BINARY_PACKED,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        self.pages_bytes += self.scratch.len();
        self.pages
            .push(CompressedPage::new(page, self.scratch.len()));
        self.values.clear();
        self.defs.clear();
        self.rows_in_page = 0;
    }

    pub fn held_bytes(&self) -> usize {
        self.pages_bytes + self.values.len() * 8
    }

    /// Writes the chunk into `file`; the column starts a new chunk.
    pub fn close<W: Write + Send>(&mut self, file: &mut footer::File<W>) -> Result<()> {
        self.end_page();
        let bounds = (self.low <= self.high).then_some(Bounds::I64(self.low, self.high));
        write_chunk(
            file,
            self.pages.drain(..),
            self.rows,
            codec::UNCOMPRESSED,
            &[encoding::RLE, encoding::DELTA_BINARY_PACKED],
            Some(ChunkStats {
                bounds,
                nulls: self.nulls,
            }),
        )?;
        self.pages_bytes = 0;
        self.rows = 0;
        self.nulls = 0;
        self.low = i64::MAX;
        self.high = i64::MIN;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::footer::File;
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::statistics::Statistics;
    use parquet::schema::parser::parse_message_type;
    use parquet::schema::types::SchemaDescriptor;
    use std::sync::Arc;

    /// A file of two row groups, read back by the parquet crate.
    #[test]
    fn the_parquet_crate_reads_it() {
        let schema = "message t {
            required int32 key (INTEGER(32, false));
            required binary name (STRING);
            optional int64 time (INTEGER(64, false));
            optional binary text (STRING);
        }";
        let schema = SchemaDescriptor::new(Arc::new(parse_message_type(schema).unwrap()));
        let mut z = zstd::bulk::Compressor::new(1).unwrap();
        let mut key = KeyColumn::new();
        let mut time = TimeColumn::new(schema.column(2));
        let mut text = TextColumn::new();
        let mut file = File::new(Vec::new(), schema).unwrap();
        let names = ["a", "bb", "ccc"];
        let mut row = 0u32;
        for rows in [5u32, 40_000] {
            for _ in 0..rows {
                key.push(row % 3, &mut z).unwrap();
                time.push((!row.is_multiple_of(7)).then_some(i64::from(row) * 10));
                let t = format!("t{row}");
                text.push(row.is_multiple_of(2).then_some(t.as_bytes()), &mut z)
                    .unwrap();
                row += 1;
            }
            key.close(
                &mut z,
                &[&|k| Plain::Int(k as i32), &|k| {
                    Plain::Str(names[k as usize])
                }],
                &mut file,
            )
            .unwrap();
            time.close(&mut file).unwrap();
            text.close(&mut z, &mut file).unwrap();
            file.end_group(u64::from(rows)).unwrap();
        }
        let bytes = bytes::Bytes::from(file.close("test").unwrap());
        let reader = SerializedFileReader::new(bytes).unwrap();
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows(), 40_005);
        assert_eq!(meta.num_row_groups(), 2);
        let g = meta.row_group(1);
        assert_eq!(g.num_rows(), 40_000);
        match g.column(2).statistics() {
            Some(Statistics::Int64(s)) => {
                assert_eq!(s.min_opt(), Some(&50));
                assert_eq!(s.max_opt(), Some(&400_040));
                assert_eq!(s.null_count_opt(), Some(5714));
            }
            other => panic!("statistics {other:?}"),
        }
        let rows: Vec<_> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|r| r.unwrap().to_string())
            .collect();
        assert_eq!(rows.len(), 40_005);
        assert_eq!(rows[0], "{key: 0, name: \"a\", time: null, text: \"t0\"}");
        assert_eq!(
            rows[40_004],
            "{key: 2, name: \"ccc\", time: 400040, text: \"t40004\"}"
        );
    }
}
