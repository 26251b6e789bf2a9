import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startAnthropicMock, startOpenAIChatMock, startGeminiMock } from './integration/lib/vendor_mocks.mjs';
import { startTahua, gatewayConfig } from './integration/lib/tahua.mjs';
const timeouts = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const am = await startAnthropicMock(), om = await startOpenAIChatMock(), gm = await startGeminiMock();
const gw = await startTahua({ config: gatewayConfig({
  providers: [
    { name: 'anth', type: 'anthropic', base_url: am.baseUrl(), api_key: 'sk-ant-test', default_max_tokens: 512, timeouts },
    { name: 'oai', type: 'openai', base_url: om.baseUrl(), api_key: 'sk-test', timeouts },
    { name: 'gem', type: 'gemini', base_url: gm.baseUrl(), api_key: 'gm', timeouts },
  ],
  models: [
    { name: 'claude', provider: 'anth', upstream_model: 'claude-up' },
    { name: 'gpt', provider: 'oai', upstream_model: 'gpt-up' },
    { name: 'gem', provider: 'gem', upstream_model: 'gem-up' },
  ] }) });
const a = new Anthropic({ baseURL: gw.url, apiKey: 'sk-client', maxRetries: 0 });
const o = new OpenAI({ baseURL: gw.url + '/v1', apiKey: 'sk-client', maxRetries: 0 });
const tool = { name: 'get_weather', description: 'w', input_schema: { type: 'object', properties: { location: { type: 'string' } } } };
const rtool = { type: 'function', name: 'get_weather', description: 'w', parameters: { type: 'object', properties: { location: { type: 'string' } } } };
const show = async (label, f, mock) => { try { console.log(label, JSON.stringify(await f()).slice(0, 600)); } catch (e) { console.log(label, 'ERR', e.constructor.name, e.status, JSON.stringify(e.error)); } if (mock) console.log('   UP:', JSON.stringify(mock.requests.at(-1)?.body)); };
await show('tool_choice tool', () => a.messages.create({ model: 'gpt', max_tokens: 50, tools: [tool], tool_choice: { type: 'tool', name: 'get_weather' }, stop_sequences: ['END'], temperature: 0.2, top_p: 0.9, metadata: { user_id: 'u-1' }, messages: [{ role: 'user', content: 'x' }] }), om);
await show('tool_choice any', () => a.messages.create({ model: 'gpt', max_tokens: 50, tools: [tool], tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [{ role: 'user', content: 'x' }] }), om);
await show('tool_choice none', () => a.messages.create({ model: 'gpt', max_tokens: 50, tools: [tool], tool_choice: { type: 'none' }, messages: [{ role: 'user', content: 'x' }] }), om);
await show('image', () => a.messages.create({ model: 'gpt', max_tokens: 50, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }, { type: 'text', text: 'What is this?' }] }] }), om);
await show('image gem', () => a.messages.create({ model: 'gem', max_tokens: 50, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }, { type: 'text', text: 'What is this?' }] }] }), gm);
await show('tool_result blocks', () => a.messages.create({ model: 'gpt', max_tokens: 50, tools: [tool], messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'get_weather', input: {} }, { type: 'tool_use', id: 't2', name: 'get_weather', input: { location: 'Oslo' } }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'sunny' }] }, { type: 'tool_result', tool_use_id: 't2', content: 'rain', is_error: true }, { type: 'text', text: 'thanks' }] }] }), om);
await show('count unknown', () => a.messages.countTokens({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }));
await show('gem multi-turn', () => a.messages.create({ model: 'gem', max_tokens: 50, tools: [tool], messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'get_weather', input: { location: 'Oslo' } }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'sunny' }] }] }), gm);
await show('resp tool_choice', () => o.responses.create({ model: 'claude', input: [{ role: 'developer', content: 'Dev says hi' }, { role: 'user', content: [{ type: 'input_text', text: 'part A' }, { type: 'input_text', text: 'part B' }] }], tools: [rtool], tool_choice: { type: 'function', name: 'get_weather' }, temperature: 0.3 }), am);
await show('resp tool_choice required', () => o.responses.create({ model: 'gpt', input: 'x', tools: [rtool], tool_choice: 'required', parallel_tool_calls: false }), om);
await show('resp image', () => o.responses.create({ model: 'claude', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=' }, { type: 'input_text', text: 'see' }] }] }), am);
am.failNext({ status: 429 });
await show('resp 429 translated', () => o.responses.create({ model: 'claude', input: 'x' }));
om.failNext({ status: 429 });
await show('resp 429 pass', () => o.responses.create({ model: 'gpt', input: 'x' }));
await show('resp 429 pass', () => o.responses.create({ model: 'gpt', input: 'x', store: false, include: ['reasoning.encrypted_content'] }), om);
await show('resp text format', () => o.responses.create({ model: 'claude', input: 'x', text: { format: { type: 'json_schema', name: 'w', schema: { type: 'object', properties: {} } } } }), am);
await show('resp builtin tool', () => o.responses.create({ model: 'claude', input: 'x', tools: [{ type: 'web_search_preview' }] }), am);
await gw.kill(); for (const m of [am, om, gm]) await m.close();
