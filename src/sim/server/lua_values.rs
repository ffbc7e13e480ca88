//! Values across the Lua boundary, converted as Redis 7.0 converts them (RESP2): a script's
//! command arguments, a command's reply as `redis.call` returns it, and what a script
//! returns as the reply to the client.

use mlua::{Lua, Table, Value};

use super::number::{format_g17, lua_number_to_integer};
use super::reply::ServerReply;

/// The arguments of a `redis.call` as command words: strings as they are, numbers as C's
/// `%.17g` writes them. Anything else (a table, a boolean, nil) is Redis's error.
pub(super) fn command_words(args: mlua::MultiValue) -> Result<Vec<Vec<u8>>, ServerReply> {
    if args.is_empty() {
        return Err(ServerReply::err(
            "Please specify at least one argument for this redis lib call",
        ));
    }
    args.into_iter()
        .map(|arg| match arg {
            Value::String(text) => Ok(text.as_bytes().to_vec()),
            Value::Integer(number) => Ok(format_g17(number as f64).into_bytes()),
            Value::Number(number) => Ok(format_g17(number).into_bytes()),
            _ => Err(ServerReply::err(
                "Lua redis lib command arguments must be strings or integers",
            )),
        })
        .collect()
}

/// A command's reply as a Lua value, the way `redis.call` hands it to the script: nil is
/// `false`, an integer a number, a status `{ok = ...}`, an error `{err = ...}`.
pub(super) fn reply_to_lua(lua: &Lua, reply: &ServerReply) -> mlua::Result<Value> {
    Ok(match reply {
        ServerReply::Nil => Value::Boolean(false),
        ServerReply::Integer(number) => Value::Number(*number as f64),
        ServerReply::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        ServerReply::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (index, item) in items.iter().enumerate() {
                table.raw_set(index + 1, reply_to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
        ServerReply::Status(text) => Value::Table(single_field(lua, "ok", text)?),
        ServerReply::Error(text) => Value::Table(single_field(lua, "err", text)?),
    })
}

fn single_field(lua: &Lua, field: &str, text: &str) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set(field, text)?;
    Ok(table)
}

/// What a script returned, as the reply the client gets: a string is a bulk string, a
/// number is truncated to an integer, `true` is 1 and `false` nil; a table is an error
/// (`err`), a status (`ok`), one of the RESP3 shapes Redis also accepts (`double`,
/// `big_number`, `verbatim_string`, `map`, `set`, each written as RESP2 writes it), or else
/// an array of its elements up to the first nil.
pub(super) fn lua_to_reply(value: &Value) -> mlua::Result<ServerReply> {
    Ok(match value {
        Value::String(text) => ServerReply::Bulk(text.as_bytes().to_vec()),
        Value::Boolean(true) => ServerReply::Integer(1),
        Value::Integer(number) => ServerReply::Integer(*number),
        Value::Number(number) => ServerReply::Integer(lua_number_to_integer(*number)),
        Value::Table(table) => table_to_reply(table)?,
        _ => ServerReply::Nil,
    })
}

fn table_to_reply(table: &Table) -> mlua::Result<ServerReply> {
    if let Value::String(error) = table.raw_get("err")? {
        return Ok(ServerReply::Error(one_line(&error.to_string_lossy())));
    }
    if let Value::String(status) = table.raw_get("ok")? {
        return Ok(ServerReply::Status(one_line(&status.to_string_lossy())));
    }
    match table.raw_get("double")? {
        Value::Number(number) => return Ok(ServerReply::bulk(format_g17(number))),
        Value::Integer(number) => return Ok(ServerReply::bulk(format_g17(number as f64))),
        _ => {}
    }
    if let Value::String(number) = table.raw_get("big_number")? {
        return Ok(ServerReply::bulk(one_line(&number.to_string_lossy())));
    }
    if let Value::Table(verbatim) = table.raw_get("verbatim_string")? {
        if let (Value::String(_), Value::String(text)) =
            (verbatim.raw_get("format")?, verbatim.raw_get("string")?)
        {
            return Ok(ServerReply::Bulk(text.as_bytes().to_vec()));
        }
    }
    if let Value::Table(map) = table.raw_get("map")? {
        let mut items = Vec::new();
        for pair in map.pairs::<Value, Value>() {
            let (key, value) = pair?;
            items.push(lua_to_reply(&key)?);
            items.push(lua_to_reply(&value)?);
        }
        return Ok(ServerReply::Array(items));
    }
    if let Value::Table(set) = table.raw_get("set")? {
        let members = set
            .pairs::<Value, Value>()
            .map(|pair| lua_to_reply(&pair?.0))
            .collect::<mlua::Result<_>>()?;
        return Ok(ServerReply::Array(members));
    }
    let mut items = Vec::new();
    for index in 1.. {
        let item: Value = table.raw_get(index)?;
        if item.is_nil() {
            break;
        }
        items.push(lua_to_reply(&item)?);
    }
    Ok(ServerReply::Array(items))
}

/// A status or error line as Redis writes it: line breaks become spaces.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}
