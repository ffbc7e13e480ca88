-- The Redis API and the sandbox a script runs in, as Redis 7.0 sets them up: redis.call,
-- redis.pcall, redis.error_reply, redis.status_reply, Redis's pcall, the libraries, and
-- read-only globals. Loaded once per Lua state by script_host.rs, with the host table.
local host = ...
local error, pcall, select, setmetatable, tostring, type, xpcall =
    error, pcall, select, setmetatable, tostring, type, xpcall

local function readonly(table)
    return setmetatable({}, {
        __index = table,
        __newindex = function() error("Attempt to modify a readonly table", 2) end,
        __metatable = false,
    })
end

-- redis.call and redis.pcall are set by the host for each invocation: Rust functions, so
-- that `return redis.call(...)` keeps the script's frame (and line) on the stack, as
-- Redis's C function does.
local redis = {}
host.redis = redis
function redis.status_reply(...)
    local text = ...
    if select("#", ...) ~= 1 or type(text) ~= "string" then
        return {err = "ERR wrong number or type of arguments"}
    end
    return {ok = text}
end
-- "CODE message" keeps its code, anything else gets ERR; a leading "-" is dropped and the
-- line breaks around the message trimmed, as Redis formats an error.
function redis.error_reply(...)
    local text = ...
    if select("#", ...) ~= 1 or type(text) ~= "string" then
        return {err = "ERR wrong number or type of arguments"}
    end
    local body = text:sub(1, 1) == "-" and text:sub(2) or text
    local space = body:find(" ", 1, true)
    local code, message = "ERR", body
    if space then
        code, message = body:sub(1, space - 1), body:sub(space + 1)
    end
    message = message:gsub("^[\r\n]+", ""):gsub("[\r\n]+$", "")
    return {err = code .. " " .. message}
end

-- Redis's pcall hands back an error table's message, as Redis 6 did; an error that
-- redis.call raised counts as such a table.
local function settle(ok, ...)
    if ok then
        return true, ...
    end
    local err = ...
    local raised = host.command_error(err)
    if raised then
        return false, raised
    end
    if type(err) == "table" then
        local message = err.err
        if type(message) == "string" or type(message) == "number" then
            return false, message
        end
    end
    return false, err
end

local globals = {}
for _, name in ipairs({
    "xpcall", "tostring", "getfenv", "setmetatable", "next", "assert", "tonumber",
    "rawequal", "collectgarbage", "getmetatable", "rawset", "type", "select", "unpack",
    "gcinfo", "pairs", "rawget", "loadstring", "ipairs", "_VERSION", "setfenv", "load",
    "error", "newproxy",
}) do
    globals[name] = _G[name]
end
globals.pcall = function(f, ...) return settle(pcall(f, ...)) end
for _, name in ipairs({"string", "math", "table", "coroutine"}) do
    globals[name] = readonly(_G[name])
end
globals.redis = readonly(redis)

local env = setmetatable({}, {
    __index = function(_, name)
        local value = globals[name]
        if value == nil then
            error("Script attempted to access nonexistent global variable '"
                .. tostring(name) .. "'", 2)
        end
        return value
    end,
    __newindex = function() error("Attempt to modify a readonly table", 2) end,
    __metatable = false,
})
globals._G = env
host.env, host.globals = env, globals
function host.run(script)
    return xpcall(script, host.handler)
end
