//! Column chunks encoded in memory, spliced into the file when their row
//! group closes (`SerializedRowGroupWriter::append_column`): a row group can
//! be large (few of them: the file's footer stays small) while only its
//! encoded, compressed pages are held.
//!
//! - [`KeyColumn`]: a column whose rows are keys into values fctrace
//!   already holds (a function's index: its name, symbol or module; a
//!   task's; a depth), written with Parquet's dictionary encoding: the
//!   chunk's dictionary is the keys met in it, found by indexing an array
//!   by key, where a generic writer hashes every row's value.
//! - [`CrateColumn`]: any other column, encoded by the parquet crate's
//!   column writer into pages kept in memory.

use super::rle;
use bytes::Bytes;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriteSpec, PageWriter};
use parquet::column::writer::{
    get_column_writer, get_typed_column_writer_mut, ColumnCloseResult, ColumnWriter,
};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::errors::Result;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::properties::WriterPropertiesPtr;
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// The zstd level of every page (fast).
pub const ZSTD_LEVEL: i32 = 1;

pub fn compression() -> Compression {
    Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).expect("a valid level"))
}

/// Values per data page of a [`KeyColumn`] (its indices held until then:
/// 64 KiB).
const PAGE_VALUES: usize = 16_384;

/// A chunk's pages, compressed, as the file will hold them.
type Sink = TrackedWrite<Vec<u8>>;

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
    descrs: Vec<ColumnDescPtr>,
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
    pub fn new(descrs: Vec<ColumnDescPtr>) -> KeyColumn {
        KeyColumn {
            descrs,
            slot: Vec::new(),
            keys: Vec::new(),
            page: Vec::with_capacity(PAGE_VALUES),
            pages: Vec::new(),
            pages_bytes: 0,
            rows: 0,
            scratch: Vec::new(),
        }
    }

    pub fn push(&mut self, keys: &[u32], z: &mut zstd::bulk::Compressor<'_>) -> Result<()> {
        for &key in keys {
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
            if self.page.len() == PAGE_VALUES {
                self.end_page(z)?;
            }
        }
        self.rows += keys.len() as u64;
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

    /// Per column (in the order of the descriptors given to
    /// [`KeyColumn::new`]) its chunk (dictionary page, then data pages)
    /// and metadata, `values` giving each column's value of a key; the
    /// columns start new chunks. The chunks' statistics are the bounds of
    /// integers (none for strings).
    pub fn close<'v>(
        &mut self,
        z: &mut zstd::bulk::Compressor<'_>,
        values: &[&dyn Fn(u32) -> Plain<'v>],
    ) -> Result<Vec<(Bytes, ColumnCloseResult)>> {
        self.end_page(z)?;
        let mut chunks = Vec::with_capacity(self.descrs.len());
        for (descr, value) in self.descrs.iter().zip(values) {
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
            let mut sink = Sink::new(Vec::with_capacity(self.pages_bytes + 4096));
            let mut specs = Vec::with_capacity(self.pages.len() + 1);
            {
                let mut writer = SerializedPageWriter::new(&mut sink);
                specs.push(writer.write_page(CompressedPage::new(dictionary, self.scratch.len()))?);
                for (buf, size, values) in &self.pages {
                    let page = Page::DataPage {
                        buf: buf.clone(),
                        num_values: *values,
                        encoding: Encoding::RLE_DICTIONARY,
                        def_level_encoding: Encoding::RLE,
                        rep_level_encoding: Encoding::RLE,
                        statistics: None,
                    };
                    specs.push(writer.write_page(CompressedPage::new(page, *size))?);
                }
                writer.close()?;
            }
            let mut meta = chunk_metadata(
                descr,
                &specs,
                self.rows,
                vec![Encoding::PLAIN, Encoding::RLE, Encoding::RLE_DICTIONARY],
            );
            if let Some((lo, hi)) = bounds {
                meta = meta.set_statistics(Statistics::int32(
                    Some(lo),
                    Some(hi),
                    None,
                    Some(0),
                    false,
                ));
            }
            let result = ColumnCloseResult {
                bytes_written: sink.bytes_written() as u64,
                rows_written: self.rows,
                metadata: meta.build()?,
                bloom_filter: None,
                column_index: None,
                offset_index: None,
            };
            chunks.push((Bytes::from(sink.into_inner()?), result));
        }
        for &k in &self.keys {
            self.slot[k as usize] = 0;
        }
        self.keys.clear();
        self.pages.clear();
        self.pages_bytes = 0;
        self.rows = 0;
        Ok(chunks)
    }
}

fn compress(z: &mut zstd::bulk::Compressor<'_>, data: &[u8]) -> Result<Bytes> {
    Ok(Bytes::from(z.compress(data)?))
}

/// A chunk's metadata from its pages as written: a dictionary page first
/// when there is one.
fn chunk_metadata(
    descr: &ColumnDescPtr,
    specs: &[PageWriteSpec],
    rows: u64,
    encodings: Vec<Encoding>,
) -> parquet::file::metadata::ColumnChunkMetaDataBuilder {
    let data_offset = specs
        .iter()
        .find(|s| s.page_type != parquet::basic::PageType::DICTIONARY_PAGE)
        .map_or(0, |s| s.offset);
    let dictionary_offset = specs
        .first()
        .filter(|s| s.page_type == parquet::basic::PageType::DICTIONARY_PAGE)
        .map(|s| s.offset as i64);
    ColumnChunkMetaData::builder(descr.clone())
        .set_compression(compression())
        .set_encodings(encodings)
        .set_num_values(rows as i64)
        .set_total_compressed_size(specs.iter().map(|s| s.compressed_size as i64).sum())
        .set_total_uncompressed_size(specs.iter().map(|s| s.uncompressed_size as i64).sum())
        .set_data_page_offset(data_offset as i64)
        .set_dictionary_page_offset(dictionary_offset)
}

/// Pages of the parquet crate's column writer, into a chunk in memory.
struct MemoryPages(Arc<Mutex<Sink>>);

impl PageWriter for MemoryPages {
    fn write_page(&mut self, page: CompressedPage) -> Result<PageWriteSpec> {
        let mut sink = self.0.lock().expect("not poisoned: no panic while held");
        SerializedPageWriter::new(&mut sink).write_page(page)
    }

    fn close(&mut self) -> Result<()> {
        let mut sink = self.0.lock().expect("not poisoned: no panic while held");
        sink.flush()?;
        Ok(())
    }
}

/// A column encoded by the parquet crate's column writer (an int64 or a
/// string, optional or not).
pub struct CrateColumn {
    descr: ColumnDescPtr,
    props: WriterPropertiesPtr,
    sink: Arc<Mutex<Sink>>,
    writer: ColumnWriter<'static>,
}

impl CrateColumn {
    pub fn new(descr: ColumnDescPtr, props: WriterPropertiesPtr) -> CrateColumn {
        let sink = Arc::new(Mutex::new(Sink::new(Vec::new())));
        let writer = get_column_writer(
            descr.clone(),
            props.clone(),
            Box::new(MemoryPages(sink.clone())),
        );
        CrateColumn {
            descr,
            props,
            sink,
            writer,
        }
    }

    /// `defs`: for an optional column, per row 1 (a value in `values`) or
    /// 0 (null).
    pub fn write_i64(&mut self, values: &[i64], defs: Option<&[i16]>) -> Result<()> {
        get_typed_column_writer_mut::<Int64Type>(&mut self.writer)
            .write_batch(values, defs, None)?;
        Ok(())
    }

    pub fn write_bytes(&mut self, values: &[ByteArray], defs: Option<&[i16]>) -> Result<()> {
        get_typed_column_writer_mut::<ByteArrayType>(&mut self.writer)
            .write_batch(values, defs, None)?;
        Ok(())
    }

    /// The chunk's bytes held so far (its encoded pages; the page being
    /// encoded is bounded by the data page size).
    pub fn held_bytes(&self) -> usize {
        self.sink
            .lock()
            .expect("not poisoned: no panic while held")
            .bytes_written()
    }

    /// The chunk and its metadata; the column starts a new chunk.
    pub fn close(&mut self) -> Result<(Bytes, ColumnCloseResult)> {
        let next = get_column_writer(
            self.descr.clone(),
            self.props.clone(),
            Box::new(MemoryPages(self.sink.clone())),
        );
        let result = std::mem::replace(&mut self.writer, next).close()?;
        let mut sink = self.sink.lock().expect("not poisoned: no panic while held");
        let chunk = std::mem::replace(&mut *sink, Sink::new(Vec::new())).into_inner()?;
        Ok((Bytes::from(chunk), result))
    }
}
