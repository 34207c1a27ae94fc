//! calls.parquet as a file: its row groups' chunks written as they come,
//! and its footer (Parquet's `FileMetaData`, in Thrift's compact protocol)
//! written by fctrace.
//!
//! The parquet crate's `SerializedFileWriter` keeps every row group's
//! metadata until the file is closed, as structures: about 9.3 KiB per
//! row group of 14 columns (each column's `ColumnChunkMetaData` and the
//! slots of its page indexes and bloom filter, though none is written),
//! so its memory grows with the trace. Here each row group's part of the
//! footer is encoded when the group is written (about 0.8 kB), and only
//! those bytes are held until the end.
//!
//! The footer holds what calls.parquet needs: the flat schema (required
//! and optional leaves: INTEGER and STRING logical types), per chunk its
//! type, encodings, path, codec, values, sizes, page offsets and
//! statistics (bounds and null count), and the columns' sort order (type
//! defined). No page index, no bloom filter, no key-value metadata.

use parquet::basic::{LogicalType, Repetition, Type as PhysicalType};
use parquet::schema::types::SchemaDescriptor;
use std::io::{self, Write};

/// A chunk's metadata, as the footer holds it, its offsets from the
/// chunk's start.
pub struct ChunkMeta {
    /// Thrift's number of its compression codec ([`codec`](self::codec)).
    pub codec: i32,
    /// Thrift's numbers of its encodings ([`encoding`](self::encoding)).
    pub encodings: &'static [i32],
    pub num_values: u64,
    /// Bytes of its pages with their headers.
    pub compressed: i64,
    pub uncompressed: i64,
    pub data_offset: i64,
    pub dictionary_offset: Option<i64>,
    pub stats: Option<ChunkStats>,
}

/// A chunk's statistics.
pub struct ChunkStats {
    /// The smallest and largest values, if any.
    pub bounds: Option<Bounds>,
    pub nulls: u64,
}

pub enum Bounds {
    I32(i32, i32),
    I64(i64, i64),
}

/// Thrift compact protocol's types.
mod ty {
    pub const TRUE: u8 = 1;
    pub const FALSE: u8 = 2;
    pub const BYTE: u8 = 3;
    pub const I16: u8 = 4;
    pub const I32: u8 = 5;
    pub const I64: u8 = 6;
    pub const BINARY: u8 = 8;
    pub const LIST: u8 = 9;
    pub const STRUCT: u8 = 12;
}

/// Parquet's enums as its Thrift definition numbers them.
pub mod codec {
    pub const UNCOMPRESSED: i32 = 0;
    pub const ZSTD: i32 = 6;
}
pub mod encoding {
    pub const PLAIN: i32 = 0;
    pub const RLE: i32 = 3;
    pub const DELTA_BINARY_PACKED: i32 = 5;
    pub const RLE_DICTIONARY: i32 = 8;
}

/// A writer of Thrift's compact protocol into a byte vector.
#[derive(Default)]
struct Thrift {
    buf: Vec<u8>,
    /// The last field id of each struct being written.
    last: Vec<i16>,
    field: i16,
}

impl Thrift {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn field(&mut self, id: i16, ty: u8) {
        let delta = id - self.field;
        if (1..=15).contains(&delta) {
            self.buf.push(((delta as u8) << 4) | ty);
        } else {
            self.buf.push(ty);
            self.zigzag(i64::from(id));
        }
        self.field = id;
    }

    fn i32(&mut self, id: i16, v: i32) {
        self.field(id, ty::I32);
        self.zigzag(i64::from(v));
    }

    fn i64(&mut self, id: i16, v: i64) {
        self.field(id, ty::I64);
        self.zigzag(v);
    }

    fn i8(&mut self, id: i16, v: i8) {
        self.field(id, ty::BYTE);
        self.buf.push(v as u8);
    }

    fn bool(&mut self, id: i16, v: bool) {
        self.field(id, if v { ty::TRUE } else { ty::FALSE });
    }

    fn binary(&mut self, id: i16, v: &[u8]) {
        self.field(id, ty::BINARY);
        self.bytes(v);
    }

    fn bytes(&mut self, v: &[u8]) {
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    /// A list field's header; its elements follow.
    fn list(&mut self, id: i16, elements: u8, len: usize) {
        self.field(id, ty::LIST);
        self.list_header(elements, len);
    }

    fn list_header(&mut self, elements: u8, len: usize) {
        if len < 15 {
            self.buf.push(((len as u8) << 4) | elements);
        } else {
            self.buf.push(0xf0 | elements);
            self.varint(len as u64);
        }
    }

    /// A struct field: its fields follow, then [`Thrift::end`].
    fn begin_field(&mut self, id: i16) {
        self.field(id, ty::STRUCT);
        self.begin();
    }

    /// A struct as a list's element: its fields follow, then
    /// [`Thrift::end`].
    fn begin(&mut self) {
        self.last.push(self.field);
        self.field = 0;
    }

    fn end(&mut self) {
        self.buf.push(0);
        self.field = self.last.pop().unwrap_or(0);
    }
}

fn physical(t: PhysicalType) -> i32 {
    match t {
        PhysicalType::BOOLEAN => 0,
        PhysicalType::INT32 => 1,
        PhysicalType::INT64 => 2,
        PhysicalType::INT96 => 3,
        PhysicalType::FLOAT => 4,
        PhysicalType::DOUBLE => 5,
        PhysicalType::BYTE_ARRAY => 6,
        PhysicalType::FIXED_LEN_BYTE_ARRAY => 7,
    }
}

/// calls.parquet being written.
pub struct File<W: Write> {
    out: W,
    /// Bytes written.
    at: u64,
    schema: SchemaDescriptor,
    /// The row groups written, each a `RowGroup` struct of the footer,
    /// then the one being written.
    groups: Thrift,
    group_count: usize,
    /// The row group being written: its offset in the file, chunks,
    /// compressed and uncompressed bytes.
    group: Option<(u64, usize, i64, i64)>,
    rows: i64,
}

const MAGIC: &[u8; 4] = b"PAR1";

impl<W: Write> File<W> {
    /// The schema's leaves must be flat: required or optional, with no
    /// logical type or INTEGER or STRING.
    pub fn new(mut out: W, schema: SchemaDescriptor) -> io::Result<File<W>> {
        out.write_all(MAGIC)?;
        Ok(File {
            out,
            at: MAGIC.len() as u64,
            schema,
            groups: Thrift::default(),
            group_count: 0,
            group: None,
            rows: 0,
        })
    }

    /// Where a column chunk is written, the columns of a row group in the
    /// schema's order, each followed by [`File::chunk_written`].
    pub fn out(&mut self) -> &mut W {
        &mut self.out
    }

    /// The chunk of the next column was written ([`File::out`]): `len`
    /// bytes, `m` its metadata.
    pub fn chunk_written(&mut self, len: u64, m: &ChunkMeta) {
        let t = &mut self.groups;
        let (_, column, compressed, uncompressed) = self.group.get_or_insert_with(|| {
            // RowGroup
            t.begin();
            t.list(1, ty::STRUCT, self.schema.num_columns());
            (self.at, 0, 0, 0)
        });
        let at = self.at as i64;
        let descr = self.schema.column(*column);
        *column += 1;
        *compressed += m.compressed;
        *uncompressed += m.uncompressed;
        self.at += len;
        // ColumnChunk
        t.begin();
        t.i64(2, 0);
        // ColumnMetaData
        t.begin_field(3);
        t.i32(1, physical(descr.physical_type()));
        t.list(2, ty::I32, m.encodings.len());
        for &e in m.encodings {
            t.zigzag(i64::from(e));
        }
        let path = descr.path().parts();
        t.list(3, ty::BINARY, path.len());
        for p in path {
            t.bytes(p.as_bytes());
        }
        t.i32(4, m.codec);
        t.i64(5, m.num_values as i64);
        t.i64(6, m.uncompressed);
        t.i64(7, m.compressed);
        t.i64(9, at + m.data_offset);
        if let Some(d) = m.dictionary_offset {
            t.i64(11, at + d);
        }
        if let Some(s) = &m.stats {
            // Statistics
            t.begin_field(12);
            t.i64(3, s.nulls as i64);
            let bounds = match s.bounds {
                Some(Bounds::I32(lo, hi)) => {
                    Some((hi.to_le_bytes().to_vec(), lo.to_le_bytes().to_vec()))
                }
                Some(Bounds::I64(lo, hi)) => {
                    Some((hi.to_le_bytes().to_vec(), lo.to_le_bytes().to_vec()))
                }
                None => None,
            };
            if let Some((max, min)) = bounds {
                t.binary(5, &max);
                t.binary(6, &min);
                t.bool(7, true);
                t.bool(8, true);
            }
            t.end();
        }
        t.end();
        t.end();
    }

    /// The row group's chunks were written: it has `rows` rows.
    pub fn end_group(&mut self, rows: u64) -> io::Result<()> {
        let Some((start, columns, compressed, uncompressed)) = self.group.take() else {
            return Ok(());
        };
        assert_eq!(columns, self.schema.num_columns());
        let ordinal = i16::try_from(self.group_count).map_err(|_| {
            io::Error::other("Parquet does not allow more than 32767 row groups in a file")
        })?;
        let t = &mut self.groups;
        t.i64(2, uncompressed);
        t.i64(3, rows as i64);
        t.i64(5, start as i64);
        t.i64(6, compressed);
        t.field(7, ty::I16);
        t.zigzag(i64::from(ordinal));
        t.end();
        self.group_count += 1;
        self.rows += rows as i64;
        Ok(())
    }

    /// Writes the footer; the file's writer.
    pub fn close(mut self, created_by: &str) -> io::Result<W> {
        let mut t = Thrift::default();
        // FileMetaData
        t.begin();
        t.i32(1, 2);
        let columns = self.schema.columns();
        t.list(2, ty::STRUCT, columns.len() + 1);
        // The root.
        t.begin();
        t.binary(4, self.schema.name().as_bytes());
        t.i32(5, columns.len() as i32);
        t.end();
        for c in columns {
            let info = c.self_type().get_basic_info();
            t.begin();
            t.i32(1, physical(c.physical_type()));
            let repetition = match info.repetition() {
                Repetition::REQUIRED => 0,
                Repetition::OPTIONAL => 1,
                Repetition::REPEATED => 2,
            };
            t.i32(3, repetition);
            t.binary(4, c.name().as_bytes());
            match c.logical_type_ref() {
                None => {}
                Some(LogicalType::String) => {
                    t.i32(6, 0); // UTF8
                    t.begin_field(10);
                    t.begin_field(1);
                    t.end();
                    t.end();
                }
                Some(&LogicalType::Integer {
                    bit_width,
                    is_signed,
                }) => {
                    // UINT_8 to UINT_64 are 11 to 14, INT_8 to INT_64 15 to 18.
                    let log2 = bit_width.trailing_zeros() as i32 - 3;
                    t.i32(6, if is_signed { 15 } else { 11 } + log2);
                    t.begin_field(10);
                    t.begin_field(10);
                    t.i8(1, bit_width);
                    t.bool(2, is_signed);
                    t.end();
                    t.end();
                }
                Some(other) => {
                    return Err(io::Error::other(format!(
                        "calls.parquet's footer: no logical type {other:?}"
                    )))
                }
            }
            t.end();
        }
        t.i64(3, self.rows);
        t.field(4, ty::LIST);
        t.list_header(ty::STRUCT, self.group_count);
        let head = std::mem::take(&mut t.buf);
        t.binary(6, created_by.as_bytes());
        // ColumnOrder: TYPE_ORDER for every column.
        t.list(7, ty::STRUCT, columns.len());
        for _ in columns {
            t.begin();
            t.begin_field(1);
            t.end();
            t.end();
        }
        t.end();
        let tail = t.buf;
        let len = head.len() + self.groups.buf.len() + tail.len();
        self.out.write_all(&head)?;
        self.out.write_all(&self.groups.buf)?;
        self.out.write_all(&tail)?;
        let len = u32::try_from(len).map_err(|_| io::Error::other("footer too large"))?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(MAGIC)?;
        self.out.flush()?;
        Ok(self.out)
    }
}
