//! JSON read as the OpenAPI document says, where serde's defaults differ:
//! a type with fields takes a JSON object only (serde's derived structs also
//! take an array, their fields by position), and a whole number written
//! with a fraction (`5.0`) is the integer (JSON Schema's `integer` allows it).

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, Unexpected, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::{Number, Value};

pub(super) struct Strict(pub(super) Value);

impl<'de> IntoDeserializer<'de, serde_json::Error> for Strict {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

/// `5.0` as 5; None for a number with a fraction or out of range.
fn whole(n: &Number) -> Option<i64> {
    let f = n.as_f64().filter(|_| n.is_f64())?;
    // i64::MAX as f64 rounds up to 2^63, itself out of range.
    (f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
}

fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), ..) => Unexpected::Unsigned(u),
            (_, Some(i), _) => Unexpected::Signed(i),
            (.., f) => Unexpected::Float(f.unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl<'de> de::Deserializer<'de> for Strict {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter().map(Strict));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(fields) => {
                let mut map = MapDeserializer::new(fields.into_iter().map(|(k, v)| (k, Strict(v))));
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
            Value::Number(n) => match whole(&n) {
                Some(i) => visitor.visit_i64(i),
                None => Value::Number(n).deserialize_any(visitor),
            },
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(Strict(other)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}
