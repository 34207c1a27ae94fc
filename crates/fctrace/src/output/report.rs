//! PLACEHOLDER (lead): replaced by the real report module.
