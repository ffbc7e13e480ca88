//! A script's errors as Redis reports them: a command error that `redis.call` raised
//! ([`RaisedByCall`]), the error handler every script runs under, and the reply for an
//! error a script raised, located at its line.

use std::fmt;

use mlua::{Function, Lua, Table, Value};

use super::super::reply::ServerReply;

/// The chunk name Redis gives a script: its errors read `user_script:<line>: ...`.
pub(super) const SCRIPT_CHUNK: &str = "@user_script";

/// The error a command called with `redis.call` answered, raised as a Lua error.
#[derive(Debug)]
pub(super) struct RaisedByCall(pub(super) String);

impl fmt::Display for RaisedByCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByCall {}

/// The command error in a Lua error value, if `redis.call` raised it.
pub(super) fn raised_by_call(error: &Value) -> Option<&RaisedByCall> {
    let Value::Error(error) = error else {
        return None;
    };
    let mut error: &mlua::Error = error;
    loop {
        match error {
            mlua::Error::CallbackError { cause, .. } => error = cause,
            mlua::Error::WithContext { cause, .. } => error = cause,
            mlua::Error::ExternalError(external) => return external.downcast_ref(),
            _ => return None,
        }
    }
}

/// The error handler every script runs under, as Redis's: an error that is not a table
/// becomes `{err = "ERR " .. message}`, and the error is located at the innermost line of
/// the script on the stack (the line that called `redis.call`, or that raised it).
pub(super) fn error_handler(lua: &Lua, error: Value) -> mlua::Result<Table> {
    let table = match error {
        Value::Table(table) => table,
        raised if raised_by_call(&raised).is_some() => {
            let table = lua.create_table()?;
            let message = raised_by_call(&raised).map(|raised| raised.0.as_str());
            table.raw_set("err", message)?;
            table
        }
        other => {
            let message = match other {
                Value::String(text) => text.to_string_lossy(),
                other => lua
                    .globals()
                    .get::<Function>("tostring")?
                    .call::<String>(other)?,
            };
            let table = lua.create_table()?;
            table.raw_set("err", format!("ERR {message}"))?;
            table
        }
    };
    let located = (1..).map_while(|level| {
        lua.inspect_stack(level, |frame| {
            let source = frame.source().source.map(|source| source.into_owned());
            (source, frame.current_line())
        })
    });
    for (source, line) in located {
        if let (Some(source), Some(line)) = (source, line) {
            if source == SCRIPT_CHUNK {
                table.raw_set("source", source)?;
                table.raw_set("line", line)?;
                break;
            }
        }
    }
    Ok(table)
}

/// The reply for an error a script raised: its message, and where in the script.
pub(super) fn raised_error(sha: &str, error: &Value) -> mlua::Result<ServerReply> {
    let Value::Table(table) = error else {
        return Ok(ServerReply::err(
            "the script raised an error without a message",
        ));
    };
    let Value::String(message) = table.raw_get("err")? else {
        return Ok(ServerReply::err(
            "the script raised an error without a message",
        ));
    };
    let mut line = message.to_string_lossy();
    if let (Value::String(source), Value::Integer(at)) =
        (table.raw_get("source")?, table.raw_get("line")?)
    {
        line = format!(
            "{line} script: {sha}, on {}:{at}.",
            source.to_string_lossy()
        );
    }
    Ok(ServerReply::Error(line.replace(['\r', '\n'], " ")))
}
