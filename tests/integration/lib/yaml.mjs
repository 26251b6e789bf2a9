// A minimal block-style YAML writer for test configs (objects, arrays, scalars).
// Strings are always double-quoted (JSON string syntax is valid YAML), so values such
// as "300ms", "0" or "-" keep their type.

function scalar(value) {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  throw new TypeError(`unsupported YAML scalar: ${typeof value}`);
}

function isCollection(value) {
  return value !== null && typeof value === 'object';
}

function emit(value, indent, lines) {
  const pad = ' '.repeat(indent);
  if (Array.isArray(value)) {
    if (value.length === 0) throw new TypeError('empty arrays are not emitted; omit the key');
    for (const item of value) {
      if (isCollection(item) && !Array.isArray(item)) {
        // "- key: v" then the other keys aligned under the first one.
        const sub = [];
        emit(item, indent + 2, sub);
        sub[0] = `${pad}- ${sub[0].slice(indent + 2)}`;
        lines.push(...sub);
      } else if (isCollection(item)) {
        lines.push(`${pad}-`);
        emit(item, indent + 2, lines);
      } else {
        lines.push(`${pad}- ${scalar(item)}`);
      }
    }
    return;
  }
  for (const [key, item] of Object.entries(value)) {
    if (item === undefined) continue;
    if (isCollection(item) && (Array.isArray(item) ? item.length : Object.keys(item).length)) {
      lines.push(`${pad}${key}:`);
      emit(item, indent + 2, lines);
    } else if (isCollection(item)) {
      lines.push(`${pad}${key}: ${Array.isArray(item) ? '[]' : '{}'}`);
    } else {
      lines.push(`${pad}${key}: ${scalar(item)}`);
    }
  }
}

export function toYaml(value) {
  const lines = [];
  emit(value, 0, lines);
  return `${lines.join('\n')}\n`;
}
