//! What an ID is, before and after encryption: its 64-bit layout ([`layout`]), the canonical
//! string ([`codec`]) and the type whose text is that string ([`id`]), and the order
//! `randflake_pg`'s ordered key sorts plain values by ([`ordered`]).

pub mod codec;
pub mod id;
pub mod layout;
pub mod ordered;
